"""Reports: the one-screen results table (Table-1 layout) and ``regionfed report``
(markdown + PNG plots from a run's outputs; several runs: a combined report with the
privacy–utility plot)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from regionfed.errors import DataError
from regionfed.io import write_atomic
from regionfed.report_plots import (
    majority_reference,
    plot_convergence,
    plot_per_region,
    plot_privacy_utility,
    plot_regionfed,
    read_metrics,
    training_loss_curves,
    validation_curves,
)

COLUMNS = (("Overall", "overall"), ("Intent", "intent"), ("Spell", "spell"),
           ("NER-F1", "ner_f1"), ("RRS", "rrs"), ("Worst region", "worst_region"))


def _cell(summary: dict[str, Any], key: str) -> str:
    if summary.get(key) is None:
        return "—"  # the task has no such metric
    value = 100 * summary[key]
    std = summary.get(f"{key}_std")
    return f"{value:.1f} ± {100 * std:.1f}" if std is not None else f"{value:.1f}"


def epsilon_cell(summary: dict[str, Any]) -> str:
    eps = summary.get("epsilon")
    if eps is None:
        return "∞ (no DP)"
    note = summary.get("epsilon_note")
    return f"{eps:.2f}" + (f" ({note})" if note else "")


def results_table(results: dict[str, Any]) -> str:
    """A markdown table of ``results.json``'s methods (values in %); methods that could not
    run in this setting get an ``n/a`` row."""
    header = ["Method", *(c for c, _ in COLUMNS), "ε"]
    rows = [[name, *(_cell(s, k) for _, k in COLUMNS), epsilon_cell(s)]
            for name, s in results["methods"].items()]
    rows += [[name, *("n/a" for _ in COLUMNS), "n/a"]
             for name in results.get("not_applicable", {})]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), sep, *(line(r) for r in rows)])


def data_line(results: dict[str, Any]) -> str | None:
    """One line on the data a run used: split sizes, and how many repeated texts the
    leak-free split kept in one split each (None when the loader reports neither)."""
    data = results.get("data") or {}
    sizes, source = data.get("split_sizes"), data.get("source") or {}
    parts = []
    if sizes:
        parts.append(" / ".join(f"{sizes[s]:,} {s}" for s in ("train", "val", "test")
                                if s in sizes) + " examples")
    if "duplicate_texts" in source:
        split = source.get("split", "leak_free")
        how = ("each in one split (leak-free)" if split == "leak_free"
               else "split at random (a text can be in training and test)")
        repeats = source["duplicate_texts"]
        parts.append(f"{repeats:,} repeated text{'' if repeats == 1 else 's'}, {how}")
    return "data: " + "; ".join(parts) if parts else None


def reused_notes(results: dict[str, Any]) -> list[str]:
    """One line per method whose record is another method's identical run, and why."""
    return [f"- {m}: the {r['from']} run, not trained twice — {r['because']}"
            for m, r in results.get("reused", {}).items()]


def not_applicable_notes(results: dict[str, Any]) -> list[str]:
    """One line per method that could not run, with the reason."""
    return [f"- {m}: n/a — {why}" for m, why in results.get("not_applicable", {}).items()]


def tuning_table(settings: list[tuple[str, dict[str, Any]]]) -> str | None:
    """The hyper-parameters fair tuning chose, per method and setting (None: no tuning)."""
    rows: dict[str, dict[str, str]] = {}
    for title, results in settings:
        for method, summary in results["methods"].items():
            tuning = summary.get("tuning")
            if tuning:
                chosen = ", ".join(f"{k.rsplit('.', 1)[-1]} = {v:g}" if isinstance(v, float)
                                   else f"{k.rsplit('.', 1)[-1]} = {v}"
                                   for k, v in tuning["chosen"].items())
                best = max(c["val_overall"] for c in tuning["candidates"])
                rows.setdefault(method, {})[title] = (
                    f"{chosen} (val {100 * best:.1f}, {len(tuning['candidates'])} tried)")
    if not rows:
        return None
    titles = [t for t, _ in settings]
    lines = ["| Method | " + " | ".join(titles) + " |", "|---|" + "---|" * len(titles)]
    lines += [f"| {m} | " + " | ".join(cells.get(t, "—") for t in titles) + " |"
              for m, cells in rows.items()]
    return "\n".join(lines)


def comparison_markdown(settings: list[tuple[str, dict[str, Any]]], *, command: str,
                        hardware: str, seconds: float) -> str:
    """The Table-1 layout for one or more privacy settings, with how it was produced."""
    config = settings[0][1]["config"]
    training, data = config["training"], config["data"]
    parts = ["# Comparison of every method (Table-1 layout)", "",
             "Generated by `regionfed compare`; do not edit by hand. Command:", "",
             f"```\n{command}\n```", "",
             f"{config['dataset']} ({data['num_regions']} regions × "
             f"{data['clients_per_region']} clients, {data['num_queries']} queries, "
             f"α_D = {data['alpha_d']}, concept shift {data['concept_shift']}) · model "
             f"{config['model']['name']} · {training['rounds']} rounds × "
             f"{training['local_epochs']} local epoch(s), {training['optimizer']['name']}, "
             f"batch {training['batch_size']}, q = {training['sample_rate']} · "
             f"{config['seeds']} seeds (mean ± std) · test split, values in % · "
             f"{hardware} · wall time {seconds / 60:.0f} min", ""]
    for title, results in settings:
        dp = results["config"]["dp"]
        what = "no DP" if dp["mode"] == "off" else (
            f"DP {dp['mode']}-level, σ = {dp['sigma']}, C = {dp['clip']}, δ = {dp['delta']}; "
            "ε (PLD) from the privacy ledger")
        parts += [f"## {title} ({what})", "", results_table(results), ""]
        notes = reused_notes(results) + not_applicable_notes(results)
        if notes:
            parts += [*notes, ""]
    tuning = tuning_table(settings)
    if tuning:
        parts += ["## Hyper-parameters chosen by fair tuning", "",
                  "Each trained method searched its learning rate and its key hyper-parameter "
                  "on the validation split (tuning seed "
                  f"{config['tuning']['seed']}, same rounds and epochs); the privacy cost of "
                  "tuning itself is not in ε.", "", tuning, ""]
    return "\n".join(parts)


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


def load_results(run_dir: Path) -> dict[str, Any]:
    """A finished run's ``results.json`` (a clear :class:`DataError` otherwise)."""
    results_path = run_dir / "results.json"
    if not results_path.exists():
        raise DataError(f"{results_path} not found (is {run_dir} a finished run?)")
    try:
        results = json.loads(results_path.read_text())
        results_table(results)
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise DataError(f"{results_path} is not a regionfed results file ({exc})") from None
    return results


def write_report(run_dir: Path) -> str:
    """``report.md`` and its PNG plots in ``run_dir`` (:mod:`regionfed.report_plots`);
    returns the markdown."""
    results = load_results(run_dir)
    config = results.get("config", {})
    dp = config.get("dp", {})
    training = config.get("training", {})
    title = run_dir.resolve().name  # the run's folder (every config is named "default")
    parts = [f"# {title}", "",
             f"`{run_dir}` · {config.get('dataset')} · {config.get('seeds')} seed(s) · "
             f"{training.get('rounds')} rounds × {training.get('local_epochs')} local epoch(s) · "
             f"DP {dp.get('mode')} (σ = {dp.get('sigma')}, C = {dp.get('clip')}) · "
             f"values in %, mean ± std over seeds", "", results_table(results)]
    if reused := reused_notes(results):
        parts += ["", *reused]
    users = user_personalization_table(results)
    if users:
        parts += ["", "User-level personalization (paper Eq. 5/7, test data):", "", users]
    if plot_per_region(results, run_dir / "per_region.png", title):
        parts += ["", "## Per region (test)", "", "![per-region test Overall](per_region.png)"]
    metrics_path = run_dir / "metrics.jsonl"
    if metrics_path.exists():
        records = read_metrics(metrics_path)
        curves, losses = validation_curves(records), training_loss_curves(records)
        if curves or losses:
            plot_convergence(curves, run_dir / "convergence.png", title, losses,
                             majority_reference(results))
            parts += ["", "## Convergence (validation Overall, training loss)", "",
                      "![validation Overall and training loss per round](convergence.png)"]
        for method in results.get("methods", {}):
            png = f"trajectories-{method}.png"
            if plot_regionfed(records, method, run_dir / png, title):
                parts += ["", f"## {method}: α_r, ρ_r and strategy per region (seed 0)", "",
                          f"![{method} trajectories]({png})"]
    markdown = "\n".join(parts) + "\n"
    write_atomic(run_dir / "report.md", markdown)
    return markdown


def privacy_points(runs: list[dict[str, Any]]) -> dict[str, list[tuple[float | None, float]]]:
    """Method → (ε, test Overall) over runs (ε ``None`` = no DP)."""
    points: dict[str, list[tuple[float | None, float]]] = {}
    for results in runs:
        for method, summary in results.get("methods", {}).items():
            if summary.get("overall") is not None:
                points.setdefault(method, []).append((summary.get("epsilon"),
                                                      summary["overall"]))
    return points


def write_combined_report(run_dirs: list[Path], out: Path) -> str:
    """Every run's report, and ``out/report.md`` with their tables side by side and, when
    the runs differ in σ, the privacy–utility plot; returns the combined markdown."""
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    parts = ["# regionfed report", ""]
    for run_dir in run_dirs:
        write_report(run_dir)
        results = load_results(run_dir)
        runs.append(results)
        dp = results.get("config", {}).get("dp", {})
        parts += [f"## {run_dir}", "", f"DP {dp.get('mode')} (σ = {dp.get('sigma')})", "",
                  results_table(results), "", f"Details: {run_dir / 'report.md'}", ""]
    sigmas = {(r["config"]["dp"]["mode"] != "off") * r["config"]["dp"]["sigma"] for r in runs}
    if len(sigmas) > 1:
        plot_privacy_utility(privacy_points(runs), out / "privacy_utility.png")
        parts += ["## Privacy–utility", "", "![test Overall vs ε](privacy_utility.png)", ""]
    markdown = "\n".join(parts)
    write_atomic(out / "report.md", markdown)
    return markdown
