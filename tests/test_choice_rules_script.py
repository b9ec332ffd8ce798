"""experiments/choice_rules.py: every on-device choice rule replayed on one run's models."""

import json

import pytest
from helpers import load_script
from test_cli import SMALL, run_cli


def test_the_default_rule_replayed_makes_the_runs_own_choices(tmp_path, capsys):
    script = load_script("experiments/choice_rules.py")
    run = tmp_path / "run"
    # (without the noise-aware anchor: with it, a region whose θ_r shows no signal over its
    # DP noise — every region here — makes no choice and records nothing)
    code, _, _ = run_cli(capsys, "run", *SMALL, "--methods", "regionfed-plus", "--rounds",
                         "2", "--sample-rate", "0.5", "--dp-sigma", "1", "--out", str(run),
                         "--set", "regionfed_plus.noise_aware_anchor=false")
    assert code == 0
    saved = tmp_path / "rules.json"
    assert script.main([str(run / "config.yaml"), "--seeds", "0", "--out", str(saved)]) == 0
    printed = capsys.readouterr().out
    clients = json.loads(saved.read_text())["seeds"]["0"]["clients"]
    assert len(clients) == 6 and all("refreshed" in row for row in clients.values())
    default_rule = dict(script.RULES)["posterior, κ = 3 (default)"]
    for row in clients.values():  # the replay of the default is the run's own choice
        assert script.replay({"c": row}, default_rule)[1] == {row["chosen"]: 1}
    for _, rule in script.RULES:  # no rule beats each client's best candidate on test
        assert script.replay(clients, rule)[0] <= script.best_on_test(clients) + 1e-9
    assert printed.count("\n| ") == 2 + len(script.RULES)  # header, rules, best on test
    assert script.main(["--from", str(saved)]) == 0
    assert capsys.readouterr().out == printed
    with pytest.raises(SystemExit):
        script.main([])


def test_the_served_check_makes_the_kept_model_a_peer_where_it_beats_the_served_one():
    """On 10 validation queries the bar is κ·s₀(1 − s₀)/n: the kept personal model (0.7)
    beats the served θ_r (0.5) by more than 0.075, but the refreshed one (0.65) by less than
    3·0.65·0.35/10 ≈ 0.068 — the refreshed default keeps the refreshed model, the served
    check makes the two peers and the better one wins."""
    script = load_script("experiments/choice_rules.py")
    rules = dict(script.RULES)
    row = {"n": 10, **{name: {"val": val, "jackknife": [], "test": val, "test_n": 10}
                       for name, val in (("refreshed", 0.65), ("regional", 0.5),
                                         ("global", 0.4), ("personal", 0.7))}}
    assert script.replay({"c": row}, rules["posterior, κ = 3 (default)"])[1] == {"refreshed": 1}
    served_check = rules["posterior, κ = 3, if served holds"]
    assert script.replay({"c": row}, served_check)[1] == {"personal": 1}
    row["regional"]["val"] = 0.65  # θ_r holds up: the refreshed model stays the default
    assert script.replay({"c": row}, served_check)[1] == {"refreshed": 1}
    # θ_r right on none of the 10: the choice's bar is 0 and a kept model at 0.05 beats it;
    # with the worst-case variance the check asks 3·0.25/10 = 0.075
    row["regional"]["val"], row["personal"]["val"] = 0.0, 0.05
    row["refreshed"]["val"], row["global"]["val"] = 0.04, 0.0
    assert script.replay({"c": row}, served_check)[1] == {"personal": 1}
    worst_case = rules["posterior, κ = 3, if served holds, worst-case variance"]
    assert script.replay({"c": row}, worst_case)[1] == {"refreshed": 1}
