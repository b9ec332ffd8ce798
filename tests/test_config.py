from pathlib import Path

import pytest

from regionfed.config import RunConfig, build_config, load_config, set_dotted
from regionfed.errors import ConfigError, UnknownMethodError

ROOT = Path(__file__).resolve().parents[1]


def test_shipped_default_config_is_valid():
    config = build_config(load_config(ROOT / "configs" / "default.yaml"))
    assert config.data.num_regions == 8 and config.data.clients_per_region == 10
    assert "fedavg" in config.methods and "majority" in config.methods


def test_yaml_round_trip(tmp_path):
    config = build_config({"training": {"rounds": 3}, "methods": ["fedavg"]})
    path = tmp_path / "c.yaml"
    path.write_text(config.to_yaml())
    assert build_config(load_config(path)) == config


def test_typed_errors():
    with pytest.raises(UnknownMethodError, match="nosuch"):
        build_config({"methods": ["nosuch"]})
    with pytest.raises(ConfigError, match="unknown key"):
        build_config({"trainin": {}})
    with pytest.raises(ConfigError, match=r"data\.alpha_d"):
        build_config({"data": {"alpha_d": 0}})
    assert issubclass(UnknownMethodError, ConfigError)
    assert issubclass(ConfigError, ValueError)


def test_all_expands_and_duplicates_collapse():
    config = build_config({"methods": ["fedavg", "all", "fedavg"]})
    assert config.methods[0] == "fedavg" and len(config.methods) == len(set(config.methods))
    assert "majority" in config.methods


def test_set_dotted():
    data: dict = {}
    set_dotted(data, "training.optimizer.lr", 0.1)
    assert data == {"training": {"optimizer": {"lr": 0.1}}}
    with pytest.raises(ConfigError):
        set_dotted({"training": 3}, "training.rounds", 1)
    assert isinstance(build_config(data), RunConfig)


def test_config_files_read_off_as_a_string_and_true_false_as_booleans(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("dp:\n  mode: off\ntraining:\n  client_batching: off\n"
                    "regionfed:\n  rho_search: false\n")
    config = build_config(load_config(path))
    assert config.dp.mode == "off" and config.training.client_batching == "off"
    assert config.regionfed.rho_search is False


def test_set_keeps_text_for_text_fields_and_parses_the_rest():
    from regionfed.config import apply_set_overrides

    data: dict = {}
    apply_set_overrides(data, ["name=2024", "training.rounds=3", "flower.superlink=null",
                               "model.name=cnn", "model.hidden=12", "training.device=cpu"])
    assert data["name"] == "2024" and data["training"]["rounds"] == 3
    assert data["flower"]["superlink"] is None and data["model"]["hidden"] == 12
    assert build_config(data).name == "2024"
