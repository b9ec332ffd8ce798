"""Print docs/baselines.md's "Measured" table of ``regionfed-plus`` from published studies.

One row per study point (heterogeneity, privacy, femnist, privacy-large): regionfed-plus's
test Overall, the best other method's, fedavg-ft, fedavg, ditto and local (mean ± std over
the seeds, in %), and the regional-equity column of issue 26 — regionfed-plus's worst region
against fedavg's model of that same region, min_r (Overall_plus(r) − Overall_fedavg(r)),
in points. A bold plus means no other method's mean is higher::

    .venv/bin/python experiments/plus_table.py results
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from regionfed.studies.results_doc import worst_region_gap
from regionfed.studies.runner import slug

STUDIES = ("heterogeneity", "privacy", "femnist", "privacy-large")
PLUS = "regionfed-plus"
COLUMNS = ("fedavg-ft", "fedavg", "ditto", "local")
NOT_COMPARED = {"majority", "centralized", "centralized-rw"}  # references, not methods


def cell(entry: dict | None) -> str:
    if entry is None:
        return "—"
    return f"{100 * entry['overall']:.1f} ± {100 * entry['overall_std']:.1f}"


def epsilon_note(entry: dict) -> str:
    eps = entry.get("epsilon")
    return "" if eps is None else f" (ε {eps:.2g})" if eps < 1 else f" (ε {eps:.2f})"


def rows(results: Path) -> list[str]:
    out = []
    for study in STUDIES:
        record = json.loads((results / study / "study.json").read_text())
        for variant in record["variants"]:
            methods = json.loads(
                (results / study / slug(variant) / "results.json").read_text())["methods"]
            plus = methods.get(PLUS)
            if plus is None:
                continue
            others = {m: e for m, e in methods.items() if m != PLUS and m not in NOT_COMPARED}
            best_name = max(others, key=lambda m: others[m]["overall"])
            best = others[best_name]
            fedavg = methods["fedavg"]
            _, equity, _ = worst_region_gap([seed["per_region"] for seed in plus["seeds"]],
                                            [seed["per_region"] for seed in fedavg["seeds"]])
            mark = "**" if plus["overall"] >= best["overall"] else ""
            out.append(" | ".join([
                f"| {study} {variant}{epsilon_note(plus)}",
                f"{mark}{cell(plus)}{mark}",
                f"{cell(best)} ({best_name.removeprefix('regionfed-')})",
                *(cell(methods.get(m)) for m in COLUMNS),
                f"{equity:+.1f} |"]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="the published results folder")
    args = parser.parse_args()
    print("| study point | regionfed-plus | best other | " + " | ".join(COLUMNS)
          + " | worst region vs fedavg |")
    print("|---" * (4 + len(COLUMNS)) + "|")
    print("\n".join(rows(args.results)))


if __name__ == "__main__":
    main()
