import json

import pytest
from helpers import load_script


def test_privacy_cohort_sweep_writes_a_table_with_the_accountants_epsilon(tmp_path):
    from regionfed.privacy.ledger import epsilon_pld

    module = load_script("experiments/privacy_cohort.py")
    out = tmp_path / "pc"
    assert module.main(["--cohorts", "2,4", "--rounds", "1", "--queries-per-client", "15",
                        "--methods", "fedavg", "--out", str(out)]) == 0
    rows = json.loads((out / "summary.json").read_text())["rows"]
    assert [r["cohort"] for r in rows] == [2, 4]
    # same budget at every point (ε from the accountant), noise σC/(q·n_r) shrinks with n_r
    assert rows[0]["epsilon"] == pytest.approx(epsilon_pld(4.0, 1.0, 1, 1e-5))
    assert rows[0]["epsilon"] == pytest.approx(rows[1]["epsilon"])
    assert rows[0]["noise_std"] == pytest.approx(4.0 / 2) and rows[1]["noise_std"] == 1.0
    assert (out / "privacy_cohort.png").stat().st_size > 0
    assert "| 4 |" in (out / "privacy_cohort.md").read_text()
    # every point is an ordinary run with its own privacy record
    privacy = json.loads((out / "cohort4-dp" / "privacy.json").read_text())["methods"]
    assert privacy["fedavg"]["sigma"] == 4.0
