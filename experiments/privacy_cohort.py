"""Privacy–utility curve versus cohort size (docs/privacy-cohort.md: where DP becomes cheap).

With user-level DP the noise on a regional mean has per-coordinate std σC/(q·n_r): with the
paper's 10 clients per region it swamps the update, so "DP costs 0.26 pp" cannot hold there.
This sweep fixes the privacy budget (σ, C, q, rounds ⇒ the same ε for every point, from the
accountant) and each client's data size, grows the number of clients per region n_r, and
trains every method with DP off and on. The gap between the two is the price of privacy at
that cohort size.

Every point is a normal ``regionfed run`` (its own ``runs/`` folder with ``privacy.json``);
this script only varies the config and gathers the results::

    .venv/bin/python experiments/privacy_cohort.py --cohorts 10,30,100,300 \\
        --out runs/privacy-cohort --doc docs/privacy-cohort.md

Writes ``summary.json``, ``privacy_cohort.md`` (table) and ``privacy_cohort.png`` (plot)
under ``--out`` (and copies the table to ``--doc`` when given).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from regionfed.config import (  # noqa: E402
    RunConfig,
    apply_set_overrides,
    build_config,
    load_config,
    set_dotted,
)
from regionfed.experiment import run_experiment  # noqa: E402
from regionfed.io import write_atomic, write_json  # noqa: E402
from regionfed.privacy.mechanism import noise_std_of_mean  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _csv_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "default.yaml"))
    p.add_argument("--cohorts", type=_csv_ints, default=[10, 30, 100, 300],
                   help="clients per region to sweep")
    p.add_argument("--regions", type=int, default=2)
    p.add_argument("--queries-per-client", type=int, default=40,
                   help="queries per client (all splits); fixed across the sweep")
    p.add_argument("--methods", default="fedavg,regionfed-grad")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--sigma", type=float, default=4.0)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--sample-rate", type=float, default=1.0)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any other config override (as in `regionfed run --set`)")
    p.add_argument("--out", default="runs/privacy-cohort")
    p.add_argument("--doc", default=None, help="also copy the markdown table here")
    return p.parse_args(argv)


def point_config(args: argparse.Namespace, cohort: int, private: bool) -> RunConfig:
    data = load_config(args.config)
    overrides: dict[str, Any] = {
        "name": f"cohort{cohort}-{'dp' if private else 'nodp'}",
        "data.num_regions": args.regions,
        "data.clients_per_region": cohort,
        "data.num_queries": cohort * args.regions * args.queries_per_client,
        "methods": args.methods.split(","),
        "seeds": args.seeds,
        "training.rounds": args.rounds,
        "training.sample_rate": args.sample_rate,
        "training.eval_every": args.rounds,
        "dp.mode": "user" if private else "off",
        "dp.sigma": args.sigma if private else 0.0,
        "dp.clip": args.clip,
    }
    for key, value in overrides.items():
        set_dotted(data, key, value)
    apply_set_overrides(data, args.set)
    return build_config(data)


def markdown_table(rows: list[dict[str, Any]], methods: list[str]) -> str:
    head = ("| clients/region | noise std of g̃_r | ε (PLD) | "
            + " | ".join(f"{m} off | {m} DP | {m} cost" for m in methods) + " |")
    rule = "|" + "---|" * (3 + 3 * len(methods))
    lines = [head, rule]
    for row in rows:
        cells = [str(row["cohort"]), f"{row['noise_std']:.3g}", f"{row['epsilon']:.2f}"]
        for m in methods:
            off, on = row["off"][m], row["dp"][m]
            cells += [f"{100 * off:.1f}", f"{100 * on:.1f}", f"{100 * (off - on):+.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], methods: list[str], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    cohorts = [r["cohort"] for r in rows]
    for m in methods:
        line = ax.plot(cohorts, [100 * r["off"][m] for r in rows], marker="o",
                       label=f"{m} (no DP)")[0]
        ax.plot(cohorts, [100 * r["dp"][m] for r in rows], marker="s", linestyle="--",
                color=line.get_color(), label=f"{m} (DP, ε={rows[0]['epsilon']:.2f})")
    ax.set_xscale("log")
    ax.set_xlabel("clients per region n_r")
    ax.set_ylabel("test Overall (%)")
    ax.set_title("Privacy–utility vs cohort size (user-level DP)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    methods = args.methods.split(",")
    rows = []
    for cohort in args.cohorts:
        row: dict[str, Any] = {"cohort": cohort}
        for private in (False, True):
            config = point_config(args, cohort, private)
            run_dir = out / config.name
            if run_dir.exists():
                shutil.rmtree(run_dir)
            results = run_experiment(config, run_dir, progress=False)
            row["dp" if private else "off"] = {m: results["methods"][m]["overall"]
                                               for m in methods}
            if private:
                row["epsilon"] = max(results["methods"][m]["epsilon"] for m in methods)
                row["noise_std"] = noise_std_of_mean(config.dp, args.sample_rate * cohort)
        rows.append(row)
        print(f"n_r={cohort}: " + ", ".join(
            f"{m} {100 * row['off'][m]:.1f} → {100 * row['dp'][m]:.1f}" for m in methods),
            file=sys.stderr)
    write_json(out / "summary.json", {"args": vars(args), "rows": rows})
    table = markdown_table(rows, methods)
    write_atomic(out / "privacy_cohort.md", table + "\n")
    plot(rows, methods, out / "privacy_cohort.png")
    if args.doc:
        write_atomic(Path(args.doc), table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
