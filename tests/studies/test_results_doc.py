"""``regionfed report --results-doc``: docs/results.md is generated from study folders —
our numbers from the study records, the paper's as transcribed — never typed in."""

import csv
import json

import pytest
from helpers import TINY_SWEEP as TINY

from regionfed.cli import main
from regionfed.studies.results_doc import (
    degradation,
    findings,
    load_claims,
    paper_table,
    privacy_cost,
    region_gap_table,
    scoreboard,
    single_method_effects,
    workers_phrase,
    worst_region_gap,
)


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweeps")
    # three methods each: fedavg (the equity reference), a RegionFed variant and one more
    for name, methods in (("heterogeneity", "[fedavg,regionfed-grad,regionfed-plus]"),
                          ("concept-shift", "[fedavg,local,regionfed-grad]")):
        assert main(["sweep", name, *TINY, "--set", f"methods={methods}",
                     "--out", str(root / name)]) == 0
    return root


def test_the_results_document_is_built_from_the_study_records(studies, tmp_path, capsys):
    doc = tmp_path / "results.md"
    assert main(["report", "--results-doc", str(doc), str(studies / "heterogeneity"),
                 str(studies / "concept-shift")]) == 0
    text = doc.read_text()
    for name in ("heterogeneity", "concept-shift"):
        for row in csv.DictReader((studies / name / f"{name}.csv").open()):
            assert f"{100 * float(row['overall']):.1f}" in text  # every number traces back
    assert "Table 2" in text and "RF-Meta" in text  # the paper's table beside ours
    assert "Paper: no table for this study." in text  # concept shift has none
    assert text.count("Command: `regionfed sweep") == 2
    assert text.count("min for the last invocation (one variant at a time)") == 2
    assert f"`{studies / 'heterogeneity' / 'a_D-0.1'}`" in text  # the run folder
    assert "Regional equity" in text
    assert "No region loses?" in text  # each method's worst region against fedavg's
    assert "Not measured yet: `regions`, `assignment`" in text  # what is still missing
    # a reference that ends in parentheses keeps them; one wholly in them is not doubled
    assert "## Robustness to heterogeneity (Table 2 and Table 11)\n" in text
    assert "## Concept shift (no paper table)\n" in text


def test_a_paper_reference_ending_in_parentheses_keeps_them(studies):
    from regionfed.studies.results_doc import load_claims, study_section

    record = json.loads((studies / "concept-shift" / "study.json").read_text())
    record["paper"] = "Table 1 Panel C (App. B.3)"
    assert study_section(record, load_claims()).startswith(
        "## Concept shift (Table 1 Panel C (App. B.3))\n")


def test_findings_name_the_winner_and_regionfeds_margin():
    record = {"variants": ["v"], "rows": [
        {"variant": "v", "method": "fedavg", "overall": 0.80, "overall_std": 0.01},
        {"variant": "v", "method": "region-fedavg", "overall": 0.84, "overall_std": 0.01},
        {"variant": "v", "method": "ditto", "overall": 0.83, "overall_std": None},
        {"variant": "v", "method": "regionfed-meta", "overall": 0.845, "overall_std": 0.01}]}
    (sentence,) = findings(record)
    assert sentence.startswith("v: best is regionfed-meta (84.5)")
    assert "vs fedavg: +4.5 points (ahead" in sentence
    assert "vs region-fedavg: +0.5 points (within seed noise" in sentence
    assert "best personalized baseline ditto: +1.5 points" in sentence


def test_the_recommended_method_is_compared_with_fedavg_and_local_even_when_not_best():
    record = {"variants": ["v"], "rows": [
        {"variant": "v", "method": "fedavg", "overall": 0.80, "overall_std": 0.01},
        {"variant": "v", "method": "local", "overall": 0.79, "overall_std": 0.002},
        {"variant": "v", "method": "regionfed-grad", "overall": 0.85, "overall_std": 0.01},
        {"variant": "v", "method": "regionfed-plus", "overall": 0.785, "overall_std": 0.003}]}
    (sentence,) = findings(record)
    assert "regionfed-grad vs fedavg: +5.0 points (ahead" in sentence  # RegionFed's best
    assert "regionfed-plus (recommended) vs fedavg: -1.5 points (behind, ±1.0)" in sentence
    assert "regionfed-plus (recommended) vs local: -0.5 points (behind, ±0.3)" in sentence
    # where it is RegionFed's best, each margin is said once (local as the best baseline)
    record["rows"][2]["overall"] = 0.70
    (sentence,) = findings(record)
    assert "regionfed-plus vs fedavg: -1.5" in sentence and "baseline local: -0.5" in sentence
    assert "(recommended)" not in sentence


def test_a_single_seed_margin_says_it_has_no_noise_band():
    record = {"variants": ["σ=4"], "rows": [
        {"variant": "σ=4", "method": "fedavg", "overall": 0.53, "overall_std": None,
         "seeds": 1},
        {"variant": "σ=4", "method": "regionfed-grad", "overall": 0.45, "overall_std": None,
         "seeds": 1}]}
    (sentence,) = findings(record)
    assert sentence.endswith("vs fedavg: -8.0 points (behind; 1 seed, no noise band).")


def test_the_transcribed_paper_tables_render():
    claims = load_claims()
    table = paper_table(claims["assignment"])
    assert table.startswith("*Table 13") and table.count("\n|") >= 3


def test_a_folder_without_a_study_record_is_one_error_line(tmp_path, capsys):
    assert main(["report", "--results-doc", str(tmp_path / "r.md"), str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "study.json not found" in err[0]
    assert not (tmp_path / "r.md").exists()


def test_degradation_ranks_methods_by_points_lost_from_low_to_high_heterogeneity():
    record = {"variants": ["α_D=1.0", "α_D=0.3", "α_D=0.1"], "rows": [
        {"variant": "α_D=1.0", "method": "fedavg", "overall": 0.80},
        {"variant": "α_D=0.1", "method": "fedavg", "overall": 0.70},
        {"variant": "α_D=1.0", "method": "regionfed-meta", "overall": 0.82},
        {"variant": "α_D=0.1", "method": "regionfed-meta", "overall": 0.79}]}
    (sentence,) = degradation(record)
    assert "regionfed-meta lost 3.0, fedavg lost 10.0" in sentence


def test_privacy_cost_is_each_methods_drop_below_its_own_no_dp_result():
    record = {"variants": ["no DP", "σ=4"], "rows": [
        {"variant": "no DP", "method": "fedavg", "overall": 0.80, "epsilon": None},
        {"variant": "no DP", "method": "regionfed-grad", "overall": 0.82, "epsilon": None},
        {"variant": "σ=4", "method": "fedavg", "overall": 0.50, "epsilon": 3.1},
        {"variant": "σ=4", "method": "regionfed-grad", "overall": 0.62, "epsilon": 3.1}]}
    (sentence,) = privacy_cost(record)
    assert sentence == ("σ=4 (ε = 3.10): cost of DP in points below no DP: fedavg +30.0, "
                        "regionfed-grad +20.0.")
    record["rows"][3]["epsilon"] = 4.5  # a method that releases twice a round
    assert privacy_cost(record)[0].startswith("σ=4 (ε = 3.10–4.50):")
    for row in record["rows"][:2]:  # no-DP rows of another setting are no baseline
        row["variant"] = "α_min=0.5"
    assert privacy_cost(record) == []


def test_the_scoreboard_counts_each_study_point_once_per_rival():
    def point(variant, fedavg, meta):
        return [{"variant": variant, "method": "fedavg", "overall": fedavg, "overall_std": 0.01},
                {"variant": variant, "method": "regionfed-meta", "overall": meta,
                 "overall_std": 0.01}]
    records = [{"variants": ["a", "b"], "rows": point("a", 0.80, 0.85) + point("b", 0.80, 0.805)},
               {"variants": ["c"], "rows": point("c", 0.80, 0.70)}]
    (line,) = scoreboard(records)
    assert line == ("RegionFed (its best strategy per point) vs fedavg: ahead at 1, within "
                    "seed noise at 1, behind at 1 of 3 study points.")


def test_a_sensitivity_study_reports_each_parameters_spread_against_seed_noise():
    def row(variant, overall, std=0.005):
        return {"variant": variant, "method": "regionfed-meta", "overall": overall,
                "overall_std": std}
    record = {"variants": ["τ=0.5", "τ=1.0", "τ=2.0", "C=0.1", "C=1.0"],
              "rows": [row("τ=0.5", 0.84), row("τ=1.0", 0.85), row("τ=2.0", 0.845),
                       row("C=0.1", 0.30), row("C=1.0", 0.302, std=0.01)]}
    tau, clip = single_method_effects(record)
    assert tau == ("τ: regionfed-meta from 84.0 (τ=0.5) to 85.0 (τ=1.0), a spread of 1.0 "
                   "points (beyond seed noise, ±0.5).")
    assert clip.startswith("C: regionfed-meta from 30.0 (C=0.1) to 30.2 (C=1.0)")
    assert clip.endswith("(within seed noise, ±1.0).")
    record["rows"].append({**row("τ=1.0", 0.80), "method": "fedavg"})
    assert single_method_effects(record) == []  # several methods: findings() speaks instead


def test_an_ablation_compares_every_combination_with_the_first():
    record = {"variants": ["regional only", "α", "α + ρ"], "rows": [
        {"variant": "regional only", "method": "regionfed-grad", "overall": 0.80,
         "overall_std": 0.002},
        {"variant": "α", "method": "regionfed-grad", "overall": 0.83, "overall_std": 0.002},
        {"variant": "α + ρ", "method": "regionfed-grad", "overall": 0.801,
         "overall_std": 0.002}]}
    (sentence,) = single_method_effects(record)
    assert sentence == ("Against regional only (80.0), in points: α +3.0, "
                        "α + ρ +0.1 (within seed noise).")


def test_an_ablation_with_a_parameter_sweep_reports_both():
    """ablation-plus: component combinations against the first, and a σ=… sweep apart."""
    def row(variant, overall):
        return {"variant": variant, "method": "regionfed-plus", "overall": overall,
                "overall_std": 0.002}
    record = {"variants": ["plus", "no shrinkage", "σ=1, f=0.1", "σ=1, f=0.5"],
              "rows": [row("plus", 0.86), row("no shrinkage", 0.85),
                       row("σ=1, f=0.1", 0.775), row("σ=1, f=0.5", 0.779)]}
    combinations, sweep = single_method_effects(record)
    assert combinations == "Against plus (86.0), in points: no shrinkage -1.0."
    assert sweep.startswith("σ: regionfed-plus from 77.5 (σ=1, f=0.1) to 77.9 (σ=1, f=0.5)")


def test_a_spread_is_judged_by_the_noise_of_the_two_values_it_compares():
    def row(variant, overall, std):
        return {"variant": variant, "method": "regionfed-plus", "overall": overall,
                "overall_std": std}
    record = {"variants": ["σ=1, f=0.1", "σ=1, f=0.2", "σ=1, no refresh"],
              "rows": [row("σ=1, f=0.1", 0.763, 0.028), row("σ=1, f=0.2", 0.762, 0.009),
                       row("σ=1, no refresh", 0.777, 0.001)]}
    (sweep,) = single_method_effects(record)
    assert sweep.endswith("a spread of 1.5 points (beyond seed noise, ±0.9).")


def test_degradation_names_what_the_studys_axis_measures():
    record = {"variants": ["E=1", "E=40"], "rows": [
        {"variant": "E=1", "method": "fedavg", "overall": 0.80},
        {"variant": "E=40", "method": "fedavg", "overall": 0.75},
        {"variant": "E=1", "method": "scaffold", "overall": 0.40},
        {"variant": "E=40", "method": "scaffold", "overall": 0.62}]}
    (sentence,) = degradation(record, "client drift from more local epochs")
    assert sentence == ("Degradation E=1 → E=40 (client drift from more local epochs), in "
                        "points: scaffold gained 22.0, fedavg lost 5.0.")


def test_the_wall_time_says_how_many_variants_ran_at_once():
    assert workers_phrase({"jobs": 2}) == " (2 variants at a time)"
    assert workers_phrase({}) == " (worker count not recorded)"  # records before --jobs


def test_an_epsilon_from_the_earlier_ledger_is_labelled(tmp_path):
    from regionfed.studies.results_doc import LEGACY_LEDGER, legacy_ledger_note, our_table

    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    base = {"epsilon_infinite": False, "epsilon_pld": 2.4}
    (old / "privacy.json").write_text(json.dumps({"methods": {"fedavg": base}}))
    (new / "privacy.json").write_text(json.dumps(
        {"methods": {"fedavg": {**base, "events": []}}}))
    rows = [{"variant": v, "method": "fedavg", "overall": 0.5, "overall_std": None,
             "epsilon": 2.4, "run": str(folder)} for v, folder in (("a", old), ("b", new))]
    assert legacy_ledger_note(rows[0]) == LEGACY_LEDGER and legacy_ledger_note(rows[1]) is None
    table = our_table({"rows": rows, "variants": ["a", "b"]})
    assert f"(ε 2.40; {LEGACY_LEDGER})" in table and "| b | 50.0 (ε 2.40) |" in table


def test_the_worst_region_gap_is_the_largest_loss_against_the_reference():
    ours = [{"a": 0.90, "b": 0.70}, {"a": 0.92, "b": 0.72}]
    fedavg = [{"a": 0.85, "b": 0.80}, {"a": 0.85, "b": 0.80}]
    region, points, noise = worst_region_gap(ours, fedavg)
    assert region == "b" and points == pytest.approx(-9.0)
    assert noise == pytest.approx(100 * 0.02 / 2**0.5)  # the larger per-region seed std


def test_a_region_that_loses_beyond_seed_noise_is_marked(tmp_path):
    def run(name, per_region_seeds):
        folder = tmp_path / name
        folder.mkdir()
        seeds = [{"per_region": r} for r in per_region_seeds]
        (folder / "results.json").write_text(json.dumps(
            {"methods": {m: {"seeds": seeds} for m in ("fedavg", "plus", "other")}}))
        return str(folder)

    fedavg = run("fedavg", [{"a": 0.80}, {"a": 0.81}])
    loses = run("loses", [{"a": 0.70}, {"a": 0.71}])
    within = run("within", [{"a": 0.795}, {"a": 0.809}])
    record = {"variants": ["v"], "rows": [
        {"variant": "v", "method": "fedavg", "run": fedavg},
        {"variant": "v", "method": "plus", "run": within},
        {"variant": "v", "method": "other", "run": loses}]}
    table = region_gap_table(record)
    assert "-0.3 a (±1.0) |" in table and "-10.0 a (±0.7) **loses**" in table
    assert region_gap_table({"variants": ["v"], "rows": record["rows"][1:]}) is None


def test_a_rerun_of_one_method_replaces_its_rows_and_is_disclosed(studies, tmp_path):
    """experiments/rerun_method.py: the method's rows of the rerun variants are the rerun's,
    every other row stays, and the results document names the rerun and its commit."""
    import shutil

    from helpers import load_script

    published = tmp_path / "heterogeneity"
    shutil.copytree(studies / "heterogeneity", published)
    before = json.loads((published / "study.json").read_text())["rows"]
    rerun = tmp_path / "rerun"
    assert main(["run", "--config", str(published / "a_D-1.0" / "config.yaml"), "--quiet",
                 "--methods", "regionfed-plus", "--seeds", "2",
                 "--out", str(rerun / "a_D-1.0")]) == 0
    assert load_script("experiments/rerun_method.py").main(
        [str(published), "regionfed-plus", str(rerun), "--commit", "abc1234"]) == 0
    after = json.loads((published / "study.json").read_text())
    def row(r):  # the copy's run folders have moved with it
        return {k: v for k, v in r.items() if k != "run"}

    changed = [(b, a) for b, a in zip(before, after["rows"], strict=True) if row(b) != row(a)]
    assert [(a["variant"], a["method"], a["seeds"]) for _, a in changed] == \
        [("α_D=1.0", "regionfed-plus", 2)]  # the rerun's seeds, only there
    rerun_results = json.loads((rerun / "a_D-1.0" / "results.json").read_text())
    assert changed[0][1]["overall"] == rerun_results["methods"]["regionfed-plus"]["overall"]
    assert after["reruns"][0]["commit"] == "abc1234"
    assert (published / "a_D-1.0" / "config-regionfed-plus.yaml").exists()
    # the command retrains from the rerun's own configuration (its --set options included)
    assert after["reruns"][0]["command"] == (f"regionfed run --config {published}/<variant>/"
                                             "config-regionfed-plus.yaml --methods regionfed-plus")
    doc = tmp_path / "results.md"
    assert main(["report", "--results-doc", str(doc), str(published)]) == 0
    assert "Rerun: regionfed-plus at α_D=1.0, trained by commit abc1234" in doc.read_text()
    # a later rerun of the same variant supersedes the earlier one's disclosure
    assert load_script("experiments/rerun_method.py").main(
        [str(published), "regionfed-plus", str(rerun), "--commit", "def5678"]) == 0
    reruns = json.loads((published / "study.json").read_text())["reruns"]
    assert [(r["method"], r["variants"], r["commit"]) for r in reruns] == \
        [("regionfed-plus", ["α_D=1.0"], "def5678")]
    # another variant rerun by the same commit joins that entry, in the study's order
    shutil.copytree(rerun / "a_D-1.0", tmp_path / "rerun2" / "a_D-0.3")
    assert load_script("experiments/rerun_method.py").main(
        [str(published), "regionfed-plus", str(tmp_path / "rerun2"), "--commit", "def5678"]) == 0
    reruns = json.loads((published / "study.json").read_text())["reruns"]
    assert [(r["method"], r["variants"], r["commit"]) for r in reruns] == \
        [("regionfed-plus", ["α_D=1.0", "α_D=0.3"], "def5678")]


def test_plus_table_rows_are_read_from_the_study_folders(tmp_path):
    """experiments/plus_table.py (docs/baselines.md's "Measured" table): plus's cell is bold
    only when no other method's mean is higher, and the last column is the worst region's
    gap to fedavg's model of that region (mean over seeds, points)."""
    from helpers import load_script

    table = load_script("experiments/plus_table.py")

    def entry(overall, regions):
        return {"overall": overall, "overall_std": 0.01, "epsilon": None,
                "per_region": regions, "seeds": [{"per_region": regions}]}

    for study in table.STUDIES:
        (tmp_path / study / "v").mkdir(parents=True)
        (tmp_path / study / "study.json").write_text(json.dumps({"variants": ["v"]}))
        methods = {"fedavg": entry(0.80, {"a": 0.80, "b": 0.70}),
                   "local": entry(0.85 if study == "femnist" else 0.75,
                                  {"a": 0.9, "b": 0.8}),
                   "regionfed-plus": entry(0.82, {"a": 0.85, "b": 0.69})}
        (tmp_path / study / "v" / "results.json").write_text(json.dumps({"methods": methods}))
    rows = table.rows(tmp_path)
    assert len(rows) == len(table.STUDIES)
    assert rows[0] == ("| heterogeneity v | **82.0 ± 1.0** | 80.0 ± 1.0 (fedavg) | — | "
                       "80.0 ± 1.0 | — | 75.0 ± 1.0 | -1.0 |")
    femnist = next(r for r in rows if r.startswith("| femnist"))
    assert "| 82.0 ± 1.0 | 85.0 ± 1.0 (local) |" in femnist
