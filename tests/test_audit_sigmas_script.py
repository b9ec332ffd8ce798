import json

from helpers import load_script


def test_the_audit_table_script_writes_one_audit_per_sigma_and_a_table(tmp_path, monkeypatch):
    module = load_script("experiments/audit_sigmas.py")
    monkeypatch.setitem(module.BASE, "training", {**module.BASE["training"], "rounds": 2})
    monkeypatch.setitem(module.BASE, "data", {**module.BASE["data"], "num_queries": 600})
    out = tmp_path / "audit"
    assert module.main(["--sigmas", "0,4", "--methods", "fedavg", "--canaries", "40",
                        "--out", str(out)]) == 0
    table = (out / "table.md").read_text()
    assert "| 0 | fedavg | global | ∞ |" in table and "| 4 | fedavg | global | " in table
    record = json.loads((out / "sigma-4" / "audit.json").read_text())
    assert record["sigma"] == 4.0 and record["methods"]["fedavg"]["canaries"] == 40
    assert (out / "sigma-0" / "audit.png").stat().st_size > 0
