"""The PNG plots of ``regionfed report`` (matplotlib, Agg backend, no display needed).

* convergence: validation Overall vs round, and the training loss per round (which every
  round logs: the curve when validation ran only at the end), one line per method (mean
  over seeds);
* per-region bars: test Overall of every region, one bar per method;
* both draw the ``majority`` reference (test Overall; per region on the bars) as a dashed
  line when a run has it;
* RegionFed trajectories: α_r and ρ_r vs round per region, and the strategy each region
  chose in each round (``regionfed-dynamic`` routes regions to grad/meta/interp);
* privacy–utility: test Overall vs ε (PLD) across runs with different σ.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

STRATEGY_COLOURS = {"grad": "#4c72b0", "meta": "#dd8452", "interp": "#55a868",
                    "ensemble": "#c44e52"}


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (files only, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _integer_rounds(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def read_metrics(metrics_path: Path) -> list[dict[str, Any]]:
    """The round logs of ``metrics.jsonl`` (a half-written last line is skipped)."""
    records = []
    for line in metrics_path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def validation_curves(records: list[dict[str, Any]]) -> dict[str, dict[int, float]]:
    """Method → round → validation Overall (mean over seeds)."""
    return _round_means(records, lambda record: record.get("val", {}).get("overall"))


def training_loss_curves(records: list[dict[str, Any]]) -> dict[str, dict[int, float]]:
    """Method → round → mean training loss of the round's clients (mean over seeds)."""
    return _round_means(records, lambda record: record.get("train_loss"))


def _round_means(records: list[dict[str, Any]], value: Any) -> dict[str, dict[int, float]]:
    sums: dict[str, dict[int, list[float]]] = {}
    for record in records:
        if (v := value(record)) is not None:
            sums.setdefault(record["method"], {}).setdefault(record["round"], []).append(v)
    return {m: {r: float(np.mean(v)) for r, v in sorted(rounds.items())}
            for m, rounds in sums.items()}


def majority_reference(results: dict[str, Any]) -> float | None:
    """The ``majority`` method's test Overall, if the run has it."""
    return results.get("methods", {}).get("majority", {}).get("overall")


def _majority_line(ax: Any, majority: float | None) -> None:
    if majority is not None:
        ax.axhline(100 * majority, color="black", linestyle="--", linewidth=1,
                   label="majority (test)")


def plot_convergence(curves: dict[str, dict[int, float]], path: Path, title: str,
                     losses: dict[str, dict[int, float]] | None = None,
                     majority: float | None = None) -> None:
    """Validation Overall per round (left; markers only where validation ran) and, when
    given, the training loss per round (right)."""
    plt = pyplot()
    panels = 2 if losses else 1
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 4.5), squeeze=False,
                             sharex=True)
    ax = axes[0][0]
    for method, points in curves.items():
        ax.plot(list(points), [100 * v for v in points.values()], marker="o", markersize=3,
                label=method)
    _majority_line(ax, majority)
    _integer_rounds(ax)
    ax.set_xlabel("round")
    ax.set_ylabel("validation Overall (%)")
    ax.set_title(f"{title}: validation")
    ax.grid(alpha=0.3)
    if curves or majority is not None:
        ax.legend(fontsize=7, ncol=2)
    if losses:
        ax = axes[0][1]
        for method, points in losses.items():
            ax.plot(list(points), list(points.values()), marker="o", markersize=3,
                    label=method)
        _integer_rounds(ax)
        ax.set_xlabel("round")
        ax.set_ylabel("training loss (clients' mean)")
        ax.set_title(f"{title}: training loss")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_per_region(results: dict[str, Any], path: Path, title: str) -> bool:
    """Grouped bars of every method's per-region test Overall; False if nothing to plot."""
    methods = {m: r["per_region"] for m, r in results.get("methods", {}).items()
               if r.get("per_region") and m != "majority"}  # majority: the dashed line
    if not methods:
        return False
    regions = list(next(iter(methods.values())))
    plt = pyplot()
    width = 0.8 / len(methods)
    x = np.arange(len(regions))
    fig, ax = plt.subplots(figsize=(max(7, 1.1 * len(regions) + 3), 4.5))
    for k, (method, per_region) in enumerate(methods.items()):
        ax.bar(x + (k - (len(methods) - 1) / 2) * width,
               [100 * per_region[r] for r in regions], width, label=method)
    majority = results.get("methods", {}).get("majority", {}).get("per_region")
    if majority:  # each region's own majority-class score, across its group of bars
        ax.hlines([100 * majority[r] for r in regions], x - 0.45, x + 0.45, colors="black",
                  linestyles="--", linewidth=1, label="majority (test)")
    ax.set_xticks(x, regions, rotation=30 if len(regions) > 4 else 0, ha="right"
                  if len(regions) > 4 else "center", fontsize=8)
    ax.set_ylabel("test Overall (%)")
    ax.set_title(f"{title}: per region")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def regionfed_trajectories(records: list[dict[str, Any]], method: str, seed: int = 0
                           ) -> dict[str, dict[str, dict[int, Any]]]:
    """``{"alpha"|"rho"|"strategy": {region: {round: value}}}`` of one method and seed."""
    out: dict[str, dict[str, dict[int, Any]]] = {"alpha": {}, "rho": {}, "strategy": {}}
    for record in records:
        if record.get("method") != method or record.get("seed") != seed:
            continue
        for key in out:
            for region, value in (record.get(key) or {}).items():
                if isinstance(value, dict):  # ensemble: ρ per strategy; plot the grad one
                    value = value.get("grad")
                out[key].setdefault(region, {})[record["round"]] = value
    return out


def plot_regionfed(records: list[dict[str, Any]], method: str, path: Path, title: str
                   ) -> bool:
    """α_r, ρ_r and the chosen strategy per region over rounds; False without such logs."""
    series = regionfed_trajectories(records, method)
    if not series["alpha"]:
        return False
    plt = pyplot()
    regions = list(series["alpha"])
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for key, ax, label in (("alpha", axes[0], "α_r (regional weight)"),
                           ("rho", axes[1], "ρ_r (step size)")):
        for region in regions:
            points = {r: v for r, v in series[key].get(region, {}).items() if v is not None}
            ax.plot(list(points), list(points.values()), marker="o", markersize=3,
                    label=region)
        _integer_rounds(ax)
        ax.set_xlabel("round")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    ax = axes[2]
    # one scatter per colour, not per point: 160 one-point artists took ~0.3 s a plot
    points: dict[str, tuple[list[int], list[int]]] = {}
    for row, region in enumerate(regions):
        for rnd, strategy in series["strategy"].get(region, {}).items():
            xs, ys = points.setdefault(STRATEGY_COLOURS.get(str(strategy), "grey"), ([], []))
            xs.append(rnd)
            ys.append(row)
    for colour, (xs, ys) in points.items():
        ax.scatter(xs, ys, color=colour, s=30, marker="s")
    ax.set_yticks(range(len(regions)), regions, fontsize=7)
    _integer_rounds(ax)
    ax.set_xlabel("round")
    ax.set_title("strategy per region")
    for name, colour in STRATEGY_COLOURS.items():
        ax.scatter([], [], color=colour, marker="s", label=name)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4)
    fig.suptitle(f"{title}: {method}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_privacy_utility(points: dict[str, list[tuple[float | None, float]]], path: Path
                         ) -> None:
    """Test Overall vs ε per method; ε = ``None`` (no DP, ε = ∞) is drawn at the right."""
    finite = [e for pts in points.values() for e, _ in pts if e is not None]
    infinity = (max(finite) * 4 if finite else 1.0)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method, pts in points.items():
        pts = sorted(pts, key=lambda p: math.inf if p[0] is None else p[0])
        ax.plot([infinity if e is None else e for e, _ in pts], [100 * v for _, v in pts],
                marker="o", label=method)
    ax.set_xscale("log")
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    if any(e is None for pts in points.values() for e, _ in pts):
        ax.axvline(infinity, color="grey", lw=0.5, ls=":")
        ax.annotate("no DP (ε = ∞)", (infinity, ax.get_ylim()[0]), fontsize=7,
                    rotation=90, va="bottom", ha="right")
    ax.set_xlabel("ε (PLD, δ as configured)")
    ax.set_ylabel("test Overall (%)")
    ax.set_title("privacy–utility")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
