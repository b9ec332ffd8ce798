"""``regionfed flower superlink|node``: the Flower command lines they start, and their
bad-input errors (one ``error:`` line, exit status 2)."""

import shlex

import pytest

pytest.importorskip("flwr")

from regionfed.cli import main  # noqa: E402


def printed(capsys, *args):
    assert main(["flower", *args, "--print-command"]) == 0
    return shlex.split(capsys.readouterr().out.strip())


def test_superlink_command_serves_one_port_and_installs_nothing(capsys):
    command = printed(capsys, "superlink", "--port", "9300")
    assert command[0].endswith("flower-superlink")
    assert command[command.index("--port") + 1] == "9300"
    assert "--disable-runtime-dependency-installation" in command and "--insecure" in command


def test_node_command_carries_region_client_and_data(capsys, tmp_path):
    data = tmp_path / "esci.csv"
    data.write_text("x\n")
    command = printed(capsys, "node", "--superlink", "127.0.0.1:9300", "--region", "eu west",
                      "--client-index", "2", "--data", str(data), "--port", "9301")
    assert command[0].endswith("flower-supernode")
    assert command[command.index("--superlink") + 1] == "127.0.0.1:9300"
    assert command[command.index("--port") + 1] == "9301"
    node_config = command[command.index("--node-config") + 1]
    assert node_config == f'region="eu west" client-index=2 data-path="{data}"'


@pytest.mark.parametrize("args, message", [
    (["node", "--superlink", "nohost", "--region", "eu"], "flower.superlink"),
    (["node", "--superlink", "127.0.0.1:9300", "--region", "eu", "--port", "70000"],
     "port 70000"),
    (["node", "--superlink", "127.0.0.1:9300", "--region", "eu", "--client-index", "-1"],
     "--client-index"),
    (["node", "--superlink", "127.0.0.1:9300", "--region", "eu", "--data", "/no/such.csv"],
     "--data: file not found"),
    (["node", "--superlink", "127.0.0.1:9300", "--region", ""], "--region"),
])
def test_bad_node_arguments_are_one_line_errors(capsys, args, message):
    assert main(["flower", *args, "--print-command"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0]


def test_the_deployment_runtime_needs_a_superlink(capsys):
    assert main(["run", "--runtime", "flower", "--methods", "fedavg"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "--superlink" in err


def test_a_node_data_path_replaces_the_runs_data_file(tmp_path):
    from regionfed.config import build_config
    from regionfed.errors import ConfigError
    from regionfed.runtime.flower.node import with_node_data

    femnist = build_config({"dataset": "femnist"})
    moved = with_node_data(femnist, {"data-path": str(tmp_path / "mine.npz")})
    assert moved.data.path == str(tmp_path / "mine.npz")
    assert with_node_data(femnist, {}).data.path == femnist.data.path
    with pytest.raises(ConfigError, match="generated"):
        with_node_data(build_config({}), {"data-path": "x.csv"})
