"""``docs/results.md``: every finished study next to the paper's numbers, generated from the
study folders (``study.json`` + the run folders it names) — never hand-edited.

Per study: the question, our table (test Overall mean ± std over seeds per variant and
method; plus RRS / worst region / ε where the study is about them), the paper's table as
printed (``paper_claims.yaml``), the exact command, hardware and wall time, and plain
sentences computed from the numbers: which method wins each variant, RegionFed's margin over
``fedavg``, ``region-fedavg`` and the best personalized baseline, and how that compares with
the paper's claim where the paper reports the same comparison.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from regionfed import metrics
from regionfed.errors import DataError
from regionfed.studies.registry import STUDIES

CLAIMS_FILE = Path(__file__).with_name("paper_claims.yaml")
REGIONFED = ("regionfed-plus", "regionfed-grad", "regionfed-interp", "regionfed-meta",
             "regionfed-dynamic", "regionfed-ensemble", "regionfed-persist")
PERSONALIZED = ("local", "fedavg-ft", "ditto", "pfedme", "apfl", "fedbabu", "fedrep", "fedtp")
#: studies whose variants run along one axis, mildest first → what the drop from the first
#: variant to the last measures
AXES = {"heterogeneity": 'label skew; paper Table 2 "Deg."',
        "regions": "more, smaller regions", "local-epochs": "client drift from more local epochs",
        "concept-shift": "regions disagreeing on labels"}
#: study name → key in paper_claims.yaml
CLAIM_KEYS = {"heterogeneity": "heterogeneity", "regions": "regions",
              "assignment": "assignment", "ablation": "ablation",
              "sensitivity": "sensitivity", "privacy": "privacy", "privacy-large": "privacy",
              "local-epochs": "local_epochs"}


def load_claims() -> dict[str, Any]:
    if not CLAIMS_FILE.exists():
        return {}
    return yaml.safe_load(CLAIMS_FILE.read_text()) or {}


def load_study(folder: Path) -> dict[str, Any]:
    path = folder / "study.json"
    if not path.exists():
        raise DataError(f"{path} not found (run 'regionfed sweep' into {folder} first)")
    try:
        record = json.loads(path.read_text())
        record["rows"], record["variants"]  # noqa: B018 - schema check
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise DataError(f"{path} is not a regionfed study record ({exc})") from None
    return record


#: what a table says next to an ε measured before the ledger composed recorded events
LEGACY_LEDGER = "pre-issue-24 ledger: declared releases, un-noised ρ search not in ε"


def legacy_ledger_note(row: dict[str, Any]) -> str | None:
    """:data:`LEGACY_LEDGER` when the row's run folder has a ``privacy.json`` without
    recorded ``events`` (written by the earlier ledger), else ``None``."""
    path = Path(str(row.get("run", ""))) / "privacy.json"
    try:
        methods = json.loads(path.read_text())["methods"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        return None
    record = methods.get(row.get("method"))
    if not isinstance(record, dict) or record.get("epsilon_infinite", True):
        return None
    return None if "events" in record else LEGACY_LEDGER


def pct(value: float | None, std: float | None = None) -> str:
    if value is None:
        return "–"
    return f"{100 * value:.1f}" + (f" ± {100 * std:.1f}" if std is not None else "")


def our_table(record: dict[str, Any]) -> str:
    """Variants as rows, methods as columns: test Overall % (mean ± std)."""
    methods = list(dict.fromkeys(r["method"] for r in record["rows"]))
    cell = {(r["variant"], r["method"]): r for r in record["rows"]}
    lines = ["| variant | " + " | ".join(methods) + " |",
             "|---" * (len(methods) + 1) + "|"]
    for variant in record["variants"]:
        cells = []
        for method in methods:
            row = cell.get((variant, method))
            text = pct(row["overall"], row["overall_std"]) if row else "–"
            if row and row.get("epsilon") is not None:
                notes = [n for n in (row.get("epsilon_note"), legacy_ledger_note(row)) if n]
                text += f" (ε {row['epsilon']:.2f}{''.join('; ' + n for n in notes)})"
            cells.append(text)
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def equity_table(record: dict[str, Any]) -> str:
    """RRS, worst region and regional std per variant and method (heterogeneity)."""
    lines = ["| variant | method | RRS | worst region | region std |", "|---|---|---|---|---|"]
    for row in record["rows"]:
        lines.append(f"| {row['variant']} | {row['method']} | {pct(row['rrs'])} | "
                     f"{pct(row['worst_region'])} | {pct(row['region_std'])} |")
    return "\n".join(lines)


def run_results(row: dict[str, Any]) -> dict[str, Any] | None:
    """The ``results.json`` of one study row's run folder (``None`` where it is missing or
    unreadable)."""
    try:
        return json.loads((Path(str(row.get("run", ""))) / "results.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def per_region_seeds(results: dict[str, Any] | None, method: str
                     ) -> list[dict[str, float]] | None:
    """Each seed's per-region test Overall of ``method`` in a run's ``results.json``
    (``None`` where the numbers are missing)."""
    try:
        return [dict(seed["per_region"]) for seed in results["methods"][method]["seeds"]]
    except (KeyError, TypeError):
        return None


def worst_region_gap(method: list[dict[str, float]], reference: list[dict[str, float]]
                     ) -> tuple[str, float, float] | None:
    """The region where ``method`` falls furthest below ``reference``: ``(region, mean gap
    over seeds in points, seed noise in points)``, the noise being the larger of the two
    per-region seed standard deviations (as :func:`margins` uses for the Overall)."""
    regions = [r for r in reference[0] if all(r in seed for seed in method + reference)]
    if not regions:
        return None
    gaps = {}
    for region in regions:
        (ours, ours_std), (theirs, theirs_std) = (
            metrics.mean_std([seed[region] for seed in seeds]) for seeds in (method, reference))
        gaps[region] = (100 * (ours - theirs), 100 * max(ours_std, theirs_std))
    worst = min(gaps, key=lambda r: gaps[r][0])
    return worst, *gaps[worst]


def region_gap_table(record: dict[str, Any], reference: str = "fedavg") -> str | None:
    """No region loses: per study point and method, the region with the largest loss against
    ``reference``'s model of that region (test Overall, points, mean over seeds) and whether
    that loss is beyond seed noise. ``None`` where the study has no ``reference`` rows."""
    rows = record["rows"]
    methods = [m for m in dict.fromkeys(r["method"] for r in rows) if m != reference]
    cell = {(r["variant"], r["method"]): r for r in rows}
    loaded: dict[str, dict[str, Any] | None] = {}  # run folder → results.json, read once

    def seeds_of(row: dict[str, Any] | None) -> list[dict[str, float]] | None:
        if row is None:
            return None
        run = str(row.get("run", ""))
        if run not in loaded:
            loaded[run] = run_results(row)
        return per_region_seeds(loaded[run], row["method"])

    lines = ["| variant | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    found = False
    for variant in record["variants"]:
        base_seeds = seeds_of(cell.get((variant, reference)))
        cells = []
        for method in methods:
            seeds = seeds_of(cell.get((variant, method)))
            gap = worst_region_gap(seeds, base_seeds) if seeds and base_seeds else None
            if gap is None:
                cells.append("–")
                continue
            found = True
            region, points, noise = gap
            mark = " **loses**" if points < -noise else ""
            cells.append(f"{points:+.1f} {region} (±{noise:.1f}){mark}")
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines) if found else None


def paper_table(claim: dict[str, Any]) -> str:
    """A transcribed paper table as markdown (values as printed)."""
    columns = list(claim.get("columns") or [])
    texts = list(claim.get("text_columns") or [])
    lines = [f"*{claim.get('source', '')}: {claim.get('caption', '')}*", "",
             f"| {claim.get('row_header', '')} | " + " | ".join(map(str, columns + texts))
             + " |", "|---" * (len(columns) + len(texts) + 1) + "|"]
    for row in claim.get("rows") or []:
        stds = row.get("stds") or [None] * len(row.get("values", []))
        values = ["–" if v is None else (f"{v} ± {s}" if s is not None else str(v))
                  for v, s in zip(row.get("values", []), stds, strict=False)]
        values += [str((row.get("text") or {}).get(t, "")) for t in texts]
        lines.append(f"| {row.get('label', '')} | " + " | ".join(values) + " |")
    if claim.get("quote"):
        lines += ["", f"> {claim['quote']}"]
    return "\n".join(lines)


def margins(here: dict[str, dict[str, Any]]) -> list[tuple[str, str, float, float, str]]:
    """The best RegionFed strategy of one study point against ``fedavg``, ``region-fedavg``
    and the best personalized baseline present: ``(ours, rival, gap in points, seed noise in
    points, verdict)``; the verdict is ``within seed noise`` when |gap| ≤ the larger std."""
    ours = [here[m] for m in REGIONFED if m in here]
    if not ours:
        return []
    top = max(ours, key=lambda r: r["overall"])
    rivals = [here[m] for m in ("fedavg", "region-fedavg") if m in here]
    baselines = [here[m] for m in PERSONALIZED if m in here]
    if baselines:
        rivals.append(max(baselines, key=lambda r: r["overall"]))
    return [compare_rows(top, rival) for rival in rivals]


def compare_rows(ours: dict[str, Any], rival: dict[str, Any]
                 ) -> tuple[str, str, float, float, str]:
    """``(ours, rival, gap in points, seed noise in points, verdict)`` of two rows of one
    study point; ``within seed noise`` when |gap| ≤ the larger std."""
    gap = 100 * (ours["overall"] - rival["overall"])
    noise = _noise(ours, rival)
    verdict = "within seed noise" if abs(gap) <= noise else "ahead" if gap > 0 else "behind"
    return ours["method"], rival["method"], gap, noise, verdict


#: the method the README recommends, and the rivals its claim is about
RECOMMENDED, RECOMMENDED_RIVALS = "regionfed-plus", ("fedavg", "local")


def findings(record: dict[str, Any]) -> list[str]:
    """Plain sentences computed from our rows (nothing here is typed in by hand)."""
    sentences = []
    rows = record["rows"]
    for variant in record["variants"]:
        here = {r["method"]: r for r in rows if r["variant"] == variant}
        if not here:
            continue
        best = max(here.values(), key=lambda r: r["overall"])
        parts = [f"{variant}: best is {best['method']} ({pct(best['overall'])})"]
        stated = margins(here)
        claims = [(f"vs the best personalized baseline {m[1]}" if m[1] in PERSONALIZED
                   else f"{m[0]} vs {m[1]}", m) for m in stated]
        if RECOMMENDED in here:  # said even where another strategy is RegionFed's best
            said = {m[:2] for m in stated}
            claims += [(f"{RECOMMENDED} (recommended) vs {rival}",
                        compare_rows(here[RECOMMENDED], here[rival]))
                       for rival in RECOMMENDED_RIVALS
                       if rival in here and (RECOMMENDED, rival) not in said]
        for label, (ours, _, gap, noise, verdict) in claims:
            band = (f", ±{noise:.1f}" if noise else
                    "; 1 seed, no noise band" if here[ours].get("seeds") == 1 else "")
            parts.append(f"{label}: {gap:+.1f} points ({verdict}{band})")
        sentences.append("; ".join(parts) + ".")
    return sentences


def scoreboard(records: list[dict[str, Any]]) -> list[str]:
    """Across every study point (variant) of every study: how often RegionFed's best
    strategy is ahead of, within seed noise of, or behind each kind of rival."""
    tally: dict[str, dict[str, int]] = {}
    for record in records:
        for variant in record["variants"]:
            here = {r["method"]: r for r in record["rows"] if r["variant"] == variant}
            for _, rival, _, _, verdict in margins(here):
                kind = "the best personalized baseline" if rival in PERSONALIZED else rival
                tally.setdefault(kind, {"ahead": 0, "within seed noise": 0, "behind": 0})
                tally[kind][verdict] += 1
    return [f"RegionFed (its best strategy per point) vs {kind}: ahead at {t['ahead']}, "
            f"within seed noise at {t['within seed noise']}, behind at {t['behind']} of "
            f"{sum(t.values())} study points." for kind, t in tally.items()]


def degradation(record: dict[str, Any], meaning: str = 'paper Table 2 "Deg."') -> list[str]:
    """Paper Table 2's "Deg.", for any study along one axis: each method's Overall at the
    first variant (mildest: α_D = 1.0, E = 1, …) minus at the last (harshest), in points;
    smaller is more robust, and a method that improves along the axis says "gained". One
    sentence, methods from most to least robust."""
    first, last = record["variants"][0], record["variants"][-1]
    at = {(r["variant"], r["method"]): r["overall"] for r in record["rows"]}
    drops = {m: 100 * (at[(first, m)] - at[(last, m)])
             for m in dict.fromkeys(r["method"] for r in record["rows"])
             if (first, m) in at and (last, m) in at}
    if not drops:
        return []
    ranked = ", ".join(f"{m} {'lost' if d > 0 else 'gained'} {abs(d):.1f}"
                       for m, d in sorted(drops.items(), key=lambda x: x[1]))
    return [f"Degradation {first} → {last} ({meaning}), in points: {ranked}."]


def single_method_effects(record: dict[str, Any]) -> list[str]:
    """Studies of one method (ablation, sensitivity). Variants named ``parameter=value``
    (Tables 15–18): per parameter, the lowest and highest Overall and their spread against
    the seed noise of those two (a noisy third value must not hide a real spread). The
    others (Table 14's component combinations): each against the first of them, in
    points."""
    rows = record["rows"]
    if len({r["method"] for r in rows}) != 1:
        return []
    by_variant = {r["variant"]: r for r in rows}
    order = [v for v in record["variants"] if v in by_variant]
    groups: dict[str, list[dict[str, Any]]] = {}
    for variant in order:
        if "=" in variant:
            groups.setdefault(variant.split("=", 1)[0], []).append(by_variant[variant])
    sentences = []
    for parameter, members in groups.items():
        low = min(members, key=lambda r: r["overall"])
        high = max(members, key=lambda r: r["overall"])
        spread = 100 * (high["overall"] - low["overall"])
        noise = _noise(low, high)
        verdict = "within seed noise" if spread <= noise else "beyond seed noise"
        sentences.append(
            f"{parameter}: {low['method']} from {pct(low['overall'])} ({low['variant']}) "
            f"to {pct(high['overall'])} ({high['variant']}), a spread of {spread:.1f} "
            f"points ({verdict}, ±{noise:.1f}).")
    # the component combinations (Table 14 style): each against the first one
    combinations = [v for v in order if "=" not in v]
    if len(combinations) < 2:
        return sentences
    reference = by_variant[combinations[0]]
    parts = []
    for variant in combinations[1:]:
        row = by_variant[variant]
        gap = 100 * (row["overall"] - reference["overall"])
        noise = _noise(row, reference)
        parts.append(f"{variant} {gap:+.1f}" + (" (within seed noise)" if abs(gap) <= noise
                                                else ""))
    return [f"Against {combinations[0]} ({pct(reference['overall'])}), in points: "
            + ", ".join(parts) + ".", *sentences]


def privacy_cost(record: dict[str, Any]) -> list[str]:
    """The real cost of DP: per σ, each method's Overall below its own no-DP Overall (points),
    with ε (δ from the run) as the accountant recorded it in the run's ledger."""
    rows = record["rows"]
    # only against the study's own "no DP" variant (same sampling rate as every σ); a study
    # without one (sensitivity: its no-DP variants differ in other settings) has no DP cost
    baseline = {r["method"]: r["overall"] for r in rows
                if r["variant"] == "no DP" and r.get("epsilon") is None}
    sentences = []
    for variant in record["variants"]:
        here = [r for r in rows if r["variant"] == variant and r.get("epsilon") is not None]
        if not here or not baseline:
            continue
        low, high = min(r["epsilon"] for r in here), max(r["epsilon"] for r in here)
        # methods that release twice a round (regionfed-meta) spend more ε at the same σ
        eps = f"ε = {low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else \
            f"ε = {low:.2f}–{high:.2f}"
        costs = ", ".join(f"{r['method']} {100 * (baseline[r['method']] - r['overall']):+.1f}"
                          for r in here if r["method"] in baseline)
        sentences.append(f"{variant} ({eps}): cost of DP in points below no DP: {costs}.")
    return sentences


def _noise(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The larger of the two seed standard deviations, in points (0 with one seed)."""
    return 100 * max(a.get("overall_std") or 0.0, b.get("overall_std") or 0.0)


def study_section(record: dict[str, Any], claims: dict[str, Any]) -> str:
    paper = record["paper"]
    if paper.startswith("(") and paper.endswith(")"):  # already in parentheses
        paper = paper[1:-1]
    parts = [f"## {record['title']} ({paper})", "",
             f"Question: {record['question']}.", "",
             f"Ours ({'paper size' if record['full'] else 'reduced size'}; test Overall %, "
             "mean ± std over seeds):", "", our_table(record)]
    if record["study"] == "heterogeneity":
        parts += ["", "Regional equity (test):", "", equity_table(record)]
    gaps = region_gap_table(record)
    if gaps is not None:
        parts += ["", "No region loses? Per method, the region it serves worst against "
                  "fedavg's model of that region (test Overall, points, mean over seeds; "
                  "**loses** = below by more than the larger per-region seed std):", "", gaps]
    claim = claims.get(CLAIM_KEYS.get(record["study"], ""), None)
    if isinstance(claim, dict) and "rows" in claim:
        parts += ["", "Paper:", "", paper_table(claim)]
    elif isinstance(claim, dict):
        for sub in claim.values():
            if isinstance(sub, dict) and "rows" in sub:
                parts += ["", "Paper:", "", paper_table(sub)]
    else:
        parts += ["", "Paper: no table for this study."]
    # one method: what each variant changes; several: who wins each variant, by how much
    said = single_method_effects(record) or findings(record)
    if record["study"] in AXES:
        said += degradation(record, AXES[record["study"]])
    said += privacy_cost(record)
    parts += ["", "What the numbers say:", ""] + [f"- {s}" for s in said]
    runs = list(dict.fromkeys(r["run"] for r in record["rows"] if r.get("run")))
    parts += ["", f"Command: `{record['command']}`  ",
              "Run folders (config.yaml, results.json, privacy.json): "
              + ", ".join(f"`{run}`" for run in runs) + "  ",
              f"Hardware: {record['hardware']}  ",
              f"Wall time: {record['wall_seconds'] / 60:.1f} min for the last invocation"
              + workers_phrase(record)
              + (f"; the runs took {record['run_seconds'] / 60:.1f} min in all"
                 if record.get("run_seconds") else "")]
    parts += [f"Rerun: {r['method']} at {', '.join(r['variants'])}, trained by commit "
              f"{r['commit']} (`{r['command']}`); the other rows are the earlier runs'  "
              for r in record.get("reruns", [])]
    return "\n".join(parts)


def workers_phrase(record: dict[str, Any]) -> str:
    """How many variants the last invocation trained at once: the wall time depends on it."""
    jobs = record.get("jobs")
    if jobs is None:
        return " (worker count not recorded)"
    return " (one variant at a time)" if jobs == 1 else f" ({jobs} variants at a time)"


def results_markdown(folders: list[Path]) -> str:
    claims = load_claims()
    records = [load_study(f) for f in folders]
    header = ["# Results: RegionFed's studies, measured here",
              "",
              "Generated by `regionfed report --results-doc docs/results.md <study folders>` "
              "from the study records; every number traces to a run folder named in its "
              "`study.json`. The paper's numbers are transcribed as printed "
              "(`src/regionfed/studies/paper_claims.yaml`). The Table-1 comparison of every "
              "method on one federation is [comparison.md](comparison.md) "
              "(`regionfed compare`). The esci-synth studies split each client's queries at "
              "random (`data.split: random`, as they were first measured), so a repeated "
              "query can be trained on and tested; `regionfed run` splits leak-free "
              "([models.md](models.md)).", ""]
    measured = {r["study"] for r in records}
    missing = [name for name in STUDIES if name not in measured]
    summary = ["## At a glance", ""] + [f"- {line}" for line in scoreboard(records)] + [
        "- Studies here: " + ", ".join(f"{r['title']} (`{r['study']}`)" for r in records)
        + "."]
    if missing:
        summary.append("- Not measured yet: " + ", ".join(f"`{m}`" for m in missing)
                       + " (`regionfed sweep <study> --out results/<study>`).")
    summary.append("")
    return "\n".join(header + summary + [study_section(r, claims) + "\n" for r in records])
