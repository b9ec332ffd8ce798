"""Reports: the one-screen results table (Table-1 layout) and ``regionfed report``
(markdown + a PNG of validation curves from a run's outputs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from regionfed.errors import DataError
from regionfed.io import write_atomic

COLUMNS = (("Overall", "overall"), ("Intent", "intent"), ("Spell", "spell"),
           ("NER-F1", "ner_f1"), ("RRS", "rrs"), ("Worst region", "worst_region"))


def _cell(summary: dict[str, Any], key: str) -> str:
    value = 100 * summary[key]
    std = summary.get(f"{key}_std")
    return f"{value:.1f} ± {100 * std:.1f}" if std is not None else f"{value:.1f}"


def epsilon_cell(summary: dict[str, Any]) -> str:
    eps = summary.get("epsilon")
    return "∞ (no DP)" if eps is None else f"{eps:.2f}"


def results_table(results: dict[str, Any]) -> str:
    """A markdown table of ``results.json``'s methods (values in %)."""
    header = ["Method", *(c for c, _ in COLUMNS), "ε"]
    rows = [[name, *(_cell(s, k) for _, k in COLUMNS), epsilon_cell(s)]
            for name, s in results["methods"].items()]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), sep, *(line(r) for r in rows)])


def user_personalization_table(results: dict[str, Any]) -> str | None:
    """Before/after table of the user-level stage (paper Eq. 5/7), or None if no method ran it."""
    rows = [(name, s["user_personalization"]) for name, s in results["methods"].items()
            if s.get("user_personalization")]
    if not rows:
        return None
    lines = ["| Method | Overall (regional) | Overall (per-user) | Mean user before | "
             "Mean user after | Users improved |", "|---|---|---|---|---|---|"]
    for name, u in rows:
        lines.append(f"| {name} | {100 * u['overall_before']:.1f} | "
                     f"{100 * u['overall_after']:.1f} | {100 * u['mean_user_before']:.1f} | "
                     f"{100 * u['mean_user_after']:.1f} | {100 * u['users_improved']:.0f}% |")
    return "\n".join(lines)


def validation_curves(metrics_path: Path) -> dict[str, dict[int, float]]:
    """Method → round → validation Overall (mean over seeds) from ``metrics.jsonl``."""
    sums: dict[str, dict[int, list[float]]] = {}
    for line in metrics_path.read_text().splitlines():
        record = json.loads(line)
        if "val" in record:
            sums.setdefault(record["method"], {}).setdefault(record["round"], []).append(
                record["val"]["overall"])
    return {m: {r: sum(v) / len(v) for r, v in sorted(rounds.items())}
            for m, rounds in sums.items()}


def plot_curves(curves: dict[str, dict[int, float]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method, points in curves.items():
        ax.plot(list(points), [100 * v for v in points.values()], marker="o", label=method)
    ax.set_xlabel("round")
    ax.set_ylabel("validation Overall (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(run_dir: Path) -> str:
    """``report.md`` and ``curves.png`` in ``run_dir`` from its outputs; returns the markdown."""
    results_path = run_dir / "results.json"
    if not results_path.exists():
        raise DataError(f"{results_path} not found (is {run_dir} a finished run?)")
    try:
        results = json.loads(results_path.read_text())
        table = results_table(results)
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise DataError(f"{results_path} is not a regionfed results file ({exc})") from None
    config = results.get("config", {})
    dp = config.get("dp", {})
    training = config.get("training", {})
    parts = [f"# {config.get('name', run_dir.name)}", "",
             f"{config.get('dataset')} · {config.get('seeds')} seed(s) · "
             f"{training.get('rounds')} rounds × {training.get('local_epochs')} local epoch(s) · "
             f"DP {dp.get('mode')} (σ = {dp.get('sigma')}, C = {dp.get('clip')}) · "
             f"values in %, mean ± std over seeds", "", table]
    users = user_personalization_table(results)
    if users:
        parts += ["", "User-level personalization (paper Eq. 5/7, test data):", "", users]
    metrics_path = run_dir / "metrics.jsonl"
    if metrics_path.exists():
        curves = validation_curves(metrics_path)
        if curves:
            plot_curves(curves, run_dir / "curves.png", config.get("name", run_dir.name))
            parts += ["", "![validation curves](curves.png)"]
    markdown = "\n".join(parts) + "\n"
    write_atomic(run_dir / "report.md", markdown)
    return markdown
