"""experiments/choice_rules.py: every on-device choice rule replayed on one run's models."""

import json

import pytest
from helpers import load_script
from test_cli import SMALL, run_cli


def test_the_default_rule_replayed_makes_the_runs_own_choices(tmp_path, capsys):
    script = load_script("experiments/choice_rules.py")
    run = tmp_path / "run"
    code, _, _ = run_cli(capsys, "run", *SMALL, "--methods", "regionfed-plus", "--rounds",
                         "2", "--sample-rate", "0.5", "--dp-sigma", "1", "--out", str(run))
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
