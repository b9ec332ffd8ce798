"""The transcribed paper numbers (regionfed/studies/paper_claims.yaml) load and are well formed."""

from pathlib import Path

import pytest
import yaml

import regionfed

CLAIMS_PATH = Path(regionfed.__file__).parent / "studies" / "paper_claims.yaml"

STUDY_KEYS = (
    "heterogeneity",
    "regions",
    "assignment",
    "ablation",
    "sensitivity",
    "privacy",
    "local_epochs",
)
SENSITIVITY_KEYS = ("tau", "mu", "alpha_min", "clip")


@pytest.fixture(scope="module")
def claims():
    with CLAIMS_PATH.open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _tables(claims):
    yield "heterogeneity", claims["heterogeneity"]
    yield "heterogeneity.per_task", claims["heterogeneity"]["per_task"]
    for key in ("regions", "assignment", "ablation", "privacy", "local_epochs"):
        yield key, claims[key]
    for key in SENSITIVITY_KEYS:
        yield f"sensitivity.{key}", claims["sensitivity"][key]


def _row(table, label):
    matches = [row for row in table["rows"] if row["label"] == label]
    assert len(matches) == 1, label
    return matches[0]


def _cell(table, label, column):
    return _row(table, label)["values"][table["columns"].index(column)]


def test_every_study_key_present(claims):
    for key in STUDY_KEYS:
        assert key in claims, key
    assert "per_task" in claims["heterogeneity"]
    for key in SENSITIVITY_KEYS:
        assert key in claims["sensitivity"], key


def test_tables_are_well_formed(claims):
    for name, table in _tables(claims):
        for field in ("source", "caption", "columns", "rows"):
            assert field in table, (name, field)
        assert table["source"] and table["caption"], name
        assert table["columns"] and table["rows"], name
        width = len(table["columns"])
        for row in table["rows"]:
            assert isinstance(row["label"], str), (name, row)
            assert len(row["values"]) == width, (name, row["label"])
            for value in row["values"]:
                assert value is None or isinstance(value, int | float), (name, row["label"])
            if "stds" in row:
                assert len(row["stds"]) == width, (name, row["label"])
            for column in row.get("text", {}):
                assert column in table["text_columns"], (name, row["label"], column)


def test_spot_checks(claims):
    # Table 12: RF-Meta at 16 regions printed as 90.14$\pm$0.38%
    regions = claims["regions"]
    rf_meta = _row(regions, "RF-Meta")
    assert _cell(regions, "RF-Meta", "16 Reg.") == pytest.approx(90.14)
    assert rf_meta["stds"][regions["columns"].index("16 Reg.")] == pytest.approx(0.38)
    # Table 2: FedAvg degradation printed as 21.6
    hetero = claims["heterogeneity"]
    assert _cell(hetero, "FedAvg", "Deg.$\\downarrow$") == pytest.approx(21.6)
    # Table 11: FedAvg Spell / High printed as 49.1
    assert _cell(hetero["per_task"], "FedAvg", "Spell / High") == pytest.approx(49.1)
    # Table 19: RF-Meta at sigma_dp = 16.0 printed as 88.15
    assert _cell(claims["privacy"], "RF-Meta", "16.0") == pytest.approx(88.15)
    # Table 13: random assignment printed as 88.1% / –4.2%
    assignment = claims["assignment"]
    assert _row(assignment, "Random assignment")["values"] == pytest.approx([88.1, -4.2])
    # App. F.1: SCAFFOLD at E=1 printed as 7.2%
    assert _cell(claims["local_epochs"], "SCAFFOLD", "$E{=}1$") == pytest.approx(7.2)
