"""The bad-input matrix (issue 9, SPEC §9.1 error contract): every bad configuration value,
data file and command-line argument ends with exactly one ``error:`` line on stderr that
names the field or file, exit status 2, no traceback, and no run folder left behind."""

import numpy as np
import pytest
from helpers import FIXTURES

from regionfed.cli import main

RUN = ["run", "--quiet", "--methods", "majority,fedavg", "--rounds", "1"]
ESCI = ["--dataset", "esci", "--clients-per-region", "1"]


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    return str(path)


CONFIG_CASES = {
    # key out of range / wrong type / unknown (field named in the message)
    "q = 0": (["--sample-rate", "0"], "training.sample_rate"),
    "q > 1": (["--sample-rate", "1.5"], "training.sample_rate"),
    "sigma < 0": (["--dp-sigma", "-1"], "dp.sigma"),
    "C = 0": (["--dp-clip", "0"], "dp.clip"),
    "C < 0": (["--dp-clip", "-2"], "dp.clip"),
    "delta = 1": (["--dp-delta", "1"], "dp.delta"),
    "alpha_min > 1": (["--set", "regionfed.alpha_min=1.5"], "regionfed.alpha_min"),
    "alpha_min < 0": (["--set", "regionfed.alpha_min=-0.1"], "regionfed.alpha_min"),
    "tau = 0": (["--set", "regionfed.tau=0"], "tau must be > 0"),
    "tau < 0": (["--set", "regionfed.tau=-1"], "tau must be > 0"),
    "rounds = 0": (["--rounds", "0"], "training.rounds"),
    "rounds text": (["--set", "training.rounds=many"], "training.rounds"),
    "regions = 0": (["--regions", "0"], "data.num_regions"),
    "alpha_D = 0": (["--alpha-d", "0"], "data.alpha_d"),
    "unknown key": (["--set", "training.warp_speed=9"], "training.warp_speed"),
    "unknown section": (["--set", "hyperdrive.on=true"], "hyperdrive"),
    "unknown method": (["--methods", "fedmagic"], "fedmagic"),
    "unknown model": (["--set", "model.name=gpt5"], "model.name"),
    "dropout = 1": (["--set", "training.dropout=1"], "training.dropout"),
    "faults sum": (["--set", "training.dropout=0.5", "--set", "training.stragglers=0.5"],
                   "someone has to report"),
    "checkpoint_every < 0": (["--set", "training.checkpoint_every=-1"],
                             "training.checkpoint_every"),
    "flower without superlink": (["--runtime", "flower"], "flower.superlink"),
    "bad superlink": (["--runtime", "flower", "--superlink", "localhost"],
                      "flower.superlink"),
    "bad device": (["--device", "tpu"], "training.device"),
    "bad --set": (["--set", "no-equals-sign"], "--set expects KEY=VALUE"),
}


@pytest.mark.parametrize("args, message", list(CONFIG_CASES.values()),
                         ids=list(CONFIG_CASES))
def test_bad_configuration_values(args, message, tmp_path, capsys):
    check(capsys, [*RUN, *args, "--out", str(tmp_path / "run")], message)
    assert not (tmp_path / "run").exists()


def config_file_cases(tmp_path):
    return {
        "missing": (str(tmp_path / "absent.yaml"), "config file not found"),
        "not yaml": (write(tmp_path, "bad.yaml", "training: [rounds: 3\n"), "not valid YAML"),
        "not a mapping": (write(tmp_path, "list.yaml", "- 1\n- 2\n"), "mapping"),
        "wrong type": (write(tmp_path, "t.yaml", "training:\n  batch_size: [3]\n"),
                       "training.batch_size"),
    }


@pytest.mark.parametrize("case", ["missing", "not yaml", "not a mapping", "wrong type"])
def test_bad_config_files(case, tmp_path, capsys):
    path, message = config_file_cases(tmp_path)[case]
    check(capsys, [*RUN, "--config", path, "--out", str(tmp_path / "run")], message)


def data_file_cases(tmp_path):
    esci_header = (FIXTURES / "esci" / "examples.csv").read_text().splitlines()[0]
    good_esci = (FIXTURES / "esci" / "examples.csv").read_text()
    np.savez(tmp_path / "wrong.npz", pixels=np.zeros((2, 3)))
    return {
        "femnist missing": (["--dataset", "femnist", "--set",
                             f"data.path={tmp_path / 'none.npz'}"], "none.npz"),
        "femnist truncated": (["--dataset", "femnist", "--set",
                               f"data.path={write(tmp_path, 'cut.npz', b'PK' + b'0' * 40)}"],
                              "cut.npz"),
        "femnist wrong schema": (["--dataset", "femnist", "--set",
                                  f"data.path={tmp_path / 'wrong.npz'}"], "wrong.npz"),
        "esci missing": ([*ESCI, "--set", f"data.path={tmp_path / 'none.csv'}"], "none.csv"),
        "esci wrong schema": ([*ESCI, "--set", "data.path=" + write(
            tmp_path, "schema.csv", "id,text\n1,shoes\n")], "schema.csv"),
        "esci header only": ([*ESCI, "--set", "data.path=" + write(
            tmp_path, "empty.csv", esci_header + "\n")], "empty.csv"),
        "esci truncated row": ([*ESCI, "--set", "data.path=" + write(
            tmp_path, "cut.csv", good_esci + "999,half a row\n")], "cut.csv"),
        "esci empty clients": (["--dataset", "esci", "--clients-per-region", "50", "--set",
                                f"data.path={FIXTURES / 'esci' / 'examples.csv'}"],
                               "region"),
        "esci unknown region map": (["--dataset", "esci", "--clients-per-region", "1",
                                     "--set", f"data.path={FIXTURES / 'esci' / 'examples.csv'}",
                                     "--set", "data.region_by=category_map", "--set",
                                     "data.category_map=" + write(
                                         tmp_path, "map.csv", "product_id,region\n")],
                                    "map.csv"),
        "reviews bad line": (["--dataset", "reviews", "--set", "data.path=" + write(
            tmp_path, "r.jsonl", '{"text": "ok", "rating": 5, "category": "Books"}\n{oops\n')],
                             "r.jsonl"),
        "reviews bad rating": (["--dataset", "reviews", "--set", "data.path=" + write(
            tmp_path, "r7.jsonl", '{"text": "ok", "rating": 7, "category": "Books"}\n')],
                               "r7.jsonl"),
    }


@pytest.mark.parametrize("case", ["femnist missing", "femnist truncated",
                                  "femnist wrong schema", "esci missing",
                                  "esci wrong schema", "esci header only",
                                  "esci truncated row", "esci empty clients",
                                  "esci unknown region map", "reviews bad line",
                                  "reviews bad rating"])
def test_bad_data_files(case, tmp_path, capsys):
    args, message = data_file_cases(tmp_path)[case]
    check(capsys, [*RUN, *args, "--out", str(tmp_path / "run")], message)
    assert not (tmp_path / "run").exists()  # refused at start: the retry gets the same name


@pytest.mark.parametrize("argv, message", [
    (["run", "--rounds", "three"], "--rounds"),
    (["run", "--bogus-flag"], "--bogus-flag"),
    (["run", "--dataset", "imagenet"], "--dataset"),
    (["frobnicate"], "frobnicate"),
    (["privacy", "--sigma", "1"], "required"),
    (["run", "--resume", "/no/such/run"], "/no/such/run/config.yaml"),
    (["predict", "--run", "/no/such/run", "--region", "eu", "shoes"], "not a run folder"),
    (["report", "/no/such/run"], "not found"),
])
def test_bad_command_lines(argv, message, capsys):
    check(capsys, argv, message)


def check(capsys, argv, message):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own exit (our parser prints one line first)
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("error:"), err
    assert message in err[0], err[0]
    assert "Traceback" not in err[0]
