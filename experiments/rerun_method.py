"""Put one method's rerun into a published study folder, and say so in its ``study.json``.

When a change touches one method only (e.g. a new default of ``regionfed-plus``), its rows
can be retrained without retraining every other method of the study: run the method alone on
each affected variant's saved configuration, then merge::

    regionfed run --config results/heterogeneity/a_D-1.0/config.yaml \\
        --methods regionfed-plus --out runs/rerun/heterogeneity/a_D-1.0
    .venv/bin/python experiments/rerun_method.py results/heterogeneity regionfed-plus \\
        runs/rerun/heterogeneity --commit b3311ec

Every ``<rerun>/<variant folder>/results.json`` found replaces that method's entry in the
published variant's ``results.json`` and ``privacy.json``; the rerun's own configuration is
kept beside it (``config-<method>.yaml``, named with the commit under ``reruns`` in
``results.json``), the
study's rows, CSV and plot are rebuilt, and ``study.json`` gains a ``reruns`` entry (method,
variants, commit, and the command that retrains them from ``config-<method>.yaml``, which
holds every setting the rerun ran with, ``--set`` included) that ``regionfed report
--results-doc`` prints under the study:
the other rows stay the earlier runs', trained by the code that trained them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from regionfed.io import write_json
from regionfed.studies.registry import get_study
from regionfed.studies.runner import run_seconds, slug, variant_rows, write_study


def merge_variant(published: Path, rerun: Path, method: str, commit: str) -> dict:
    """The published variant's results with ``method`` replaced by the rerun's."""
    results = json.loads((published / "results.json").read_text())
    new = json.loads((rerun / "results.json").read_text())
    if method not in new["methods"]:
        raise SystemExit(f"{rerun}/results.json has no {method}")
    config_name = f"config-{method}.yaml"
    results["methods"][method] = new["methods"][method]
    results.setdefault("reruns", {})[method] = {"commit": commit, "config": config_name}
    write_json(published / "results.json", results)
    privacy_path = published / "privacy.json"
    if (rerun / "privacy.json").exists() and privacy_path.exists():
        privacy = json.loads(privacy_path.read_text())
        rerun_privacy = json.loads((rerun / "privacy.json").read_text())
        if method in rerun_privacy.get("methods", {}):
            privacy["methods"][method] = rerun_privacy["methods"][method]
            write_json(privacy_path, privacy)
    shutil.copyfile(rerun / "config.yaml", published / config_name)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("study_folder", type=Path, help="a published study (holds study.json)")
    p.add_argument("method")
    p.add_argument("rerun", type=Path, help="folder of <variant folder>/results.json reruns")
    p.add_argument("--commit", required=True, help="the commit that trained the reruns")
    args = p.parse_args(argv)
    record = json.loads((args.study_folder / "study.json").read_text())
    study = get_study(record["study"])
    merged = []
    rows = list(record["rows"])
    for variant in study.variants:
        folder = slug(variant.label)
        if not (args.rerun / folder / "results.json").exists():
            continue
        results = merge_variant(args.study_folder / folder, args.rerun / folder, args.method,
                                args.commit)
        fresh = variant_rows(study, variant, results, args.study_folder / folder)
        rows = [r for r in rows if r["variant"] != variant.label] + fresh
        merged.append(variant.label)
    if not merged:
        print(f"no rerun of any {study.name} variant under {args.rerun}", file=sys.stderr)
        return 1
    order = {v.label: i for i, v in enumerate(study.variants)}
    rows.sort(key=lambda r: order[r["variant"]])  # the study's own row order
    record["rows"] = rows
    record["run_seconds"] = run_seconds(rows)
    # an earlier rerun of this method keeps only the variants this one did not replace
    reruns = []
    for entry in record.get("reruns", []):
        if entry["method"] == args.method:
            entry = {**entry, "variants": [v for v in entry["variants"] if v not in merged]}
        if entry["variants"]:
            reruns.append(entry)
    # reruns of one method by one commit are one entry, its variants in the study's order
    # the command that retrains a row: the rerun's own configuration, kept beside it, holds
    # every setting it ran with (a --set on the command line included)
    command = (f"regionfed run --config {args.study_folder}/<variant>/config-{args.method}.yaml"
               f" --methods {args.method}")
    same = [e for e in reruns if (e["method"], e["commit"]) == (args.method, args.commit)]
    if same:
        joined = set(same[0]["variants"]) | set(merged)
        same[0]["variants"] = [v.label for v in study.variants if v.label in joined]
        same[0]["command"] = command
    else:
        reruns.append({"method": args.method, "variants": merged, "commit": args.commit,
                       "command": command})
    record["reruns"] = reruns
    write_study(record, args.study_folder)
    print(f"{study.name}: {args.method} rerun merged into {', '.join(merged)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
