"""A real Flower Deployment Engine on 127.0.0.1 (issue 8): one SuperLink and four SuperNodes
(2 regions × 2 clients) started with ``regionfed flower …`` (``LocalDeployment``: ports
checked before use, every wait bounded, every process group terminated and then killed by
PID even when a test fails), a run submitted with ``regionfed run --runtime flower``."""

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from safetensors.torch import load_file  # noqa: E402

from regionfed.cli import main  # noqa: E402

REGIONS = ("region_00", "region_01")
SMALL = ["--regions", "2", "--num-queries", "480", "--rounds", "1",
         "--set", "data.vocab_size=1000", "--set", "model.dim=32", "--set", "model.heads=2",
         "--set", "model.ngram_buckets=512", "--set", "regionfed.rho_search=false",
         "--set", "flower.run_timeout_s=400", "--set", "flower.reply_timeout_s=120",
         "--quiet"]


@pytest.fixture(scope="session")
def deployment(request):
    """A SuperLink and 4 SuperNodes with warm workers (the default); yields the
    :class:`LocalDeployment`. Session-scoped: one deployment serves every test here
    (``make test`` sends a whole file to one worker).

    It is started with the venv not activated (as under ``make test``): Flower still finds
    its helper scripts. Stopping it terminates each process group, and nothing survives
    (checked by PID when the session ends). Its folder — the nodes' logs — is kept (and
    named on stderr) when a test of the session failed."""
    from regionfed.runtime.flower.processes import LocalDeployment

    folder = Path(tempfile.mkdtemp(prefix="rf-deploy-test-", dir="/tmp"))
    nodes = [(region, index) for region in REGIONS for index in (0, 1)]
    deployment = LocalDeployment(nodes, folder)
    path = os.environ["PATH"]
    os.environ["PATH"] = "/usr/bin:/bin"
    try:
        deployment.__enter__()
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        os.environ["PATH"] = path
    pids = [p.pid for p in deployment.processes]
    assert len(pids) == 1 + len(nodes)
    try:
        yield deployment
    finally:
        deployment.__exit__(None, None, None)
        if request.session.testsfailed:  # the nodes' logs are what explains a failure here
            sys.stderr.write(f"\nFlower deployment logs kept in {folder}\n")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)


@pytest.fixture
def superlink(deployment):
    """The address of the shared deployment's SuperLink."""
    return deployment.address


def test_regionfed_grad_runs_on_the_deployment_engine(superlink, tmp_path):
    out = tmp_path / "run"
    code = main(["run", "--runtime", "flower", "--superlink", superlink,
                 "--methods", "regionfed-grad", "--clients-per-region", "2", *SMALL,
                 "--out", str(out)])
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    method = results["methods"]["regionfed-grad"]
    assert 0.0 < method["overall"] <= 1.0
    assert set(method["per_region"]) == set(REGIONS)
    rounds = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [1] and "val" in rounds[0]
    assert json.loads((out / "privacy.json").read_text())["methods"]["regionfed-grad"]
    regional = load_file(str(out / "checkpoints" / "regionfed-grad-seed0.regions.safetensors"))
    assert set(regional) == set(REGIONS)
    difference = (regional[REGIONS[0]] - regional[REGIONS[1]]).abs().max().item()
    assert difference > 1e-4  # each region got its own model


def test_a_node_that_cannot_serve_the_run_fails_it_with_a_clear_error(superlink, tmp_path,
                                                                       capsys):
    # one client per region: the nodes holding client-index 1 have no client to hold
    code = main(["run", "--runtime", "flower", "--superlink", superlink,
                 "--methods", "fedavg", "--clients-per-region", "1", *SMALL,
                 "--out", str(tmp_path / "run")])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: the Flower run of fedavg")
    assert "client-index 1" in err[0]


def test_the_run_id_is_read_from_flwr_runs_output():
    from regionfed.runtime.flower.deployment import started_run_id, stop_run

    assert started_run_id(["Loading project", "🎊 Successfully started run 83412", "x"]) \
        == 83412
    assert started_run_id(["❌ connection refused"]) is None
    assert stop_run(["❌ connection refused"], {}) == \
        "the run had not started, nothing to stop"


def test_an_unreachable_superlink_is_a_clear_error(tmp_path, capsys):
    from regionfed.runtime.flower.processes import free_ports

    (port,) = free_ports(1)
    code = main(["run", "--runtime", "flower", "--superlink", f"127.0.0.1:{port}",
                 "--methods", "fedavg", "--clients-per-region", "1", *SMALL,
                 "--set", "flower.run_timeout_s=60", "--out", str(tmp_path / "run")])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"127.0.0.1:{port}" in err[0]


def test_a_busy_port_is_refused_before_anything_starts():
    import socket

    from regionfed.errors import DeploymentError
    from regionfed.runtime.flower.processes import port_is_free, wait_for

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        assert not port_is_free(busy.getsockname()[1])
    with pytest.raises(DeploymentError, match="never within 0.5 s"):
        wait_for(lambda: False, 0.5, "never")


def test_a_process_that_cannot_start_fails_the_deployment_at_once(tmp_path):
    from regionfed.errors import DeploymentError
    from regionfed.runtime.flower.processes import LocalDeployment

    with pytest.raises(DeploymentError, match="exited with status 2: error: --region"):
        with LocalDeployment([("", 0)], tmp_path / "flower", start_timeout_s=60):
            pass


def test_every_message_of_a_node_runs_in_its_one_warm_process(deployment, tmp_path):
    """Warm workers: each node's log shows every message handled by the node process
    itself (one PID per node, the one LocalDeployment started), and no node has any child
    process — no flower-superexec, no flwr-clientapp per message."""
    import re

    code = main(["run", "--runtime", "flower", "--superlink", deployment.address,
                 "--methods", "fedavg", "--clients-per-region", "2", *SMALL,
                 "--rounds", "2", "--out", str(tmp_path / "run")])
    assert code == 0
    nodes = [(p, log) for p, log in zip(deployment.processes, deployment.logs, strict=True)
             if log.stem.startswith("node-")]
    assert len(nodes) == 4
    for process, log in nodes:
        pids = re.findall(r"warm worker \(pid (\d+)\): (\S+) handled", log.read_text())
        kinds = [kind for _, kind in pids]
        # this run alone: a query, 2 training rounds, validation and test
        assert kinds.count("train.regionfed") >= 2 and "evaluate.regionfed" in kinds
        assert {int(pid) for pid, _ in pids} == {process.pid}, log.name
        assert _children(process.pid) == [], log.name


def _children(pid: int) -> list[str]:
    """Command lines of the processes whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append((stat.parent / "cmdline").read_text().replace("\0", " "))
        except (OSError, IndexError, ValueError):
            continue
    return found


@pytest.mark.parametrize("secagg", [False, True], ids=["plain", "secagg"])
@pytest.mark.parametrize("method", ["fedavg", "regionfed-grad"])
def test_the_deployment_engine_trains_the_same_model_as_in_process(deployment, method,
                                                                   secagg):
    """Same configuration and seed on the warm Deployment Engine and in process: the same
    final global and regional parameters (SGD) — also when every update goes through
    SecAgg+ per region (each region's 2 nodes; the quantization error, ~4e-6 a round
    here, stays within the tolerance). ρ is fixed: golden-section search is a
    discontinuous function of the validation losses, and a last-bit difference (e.g. from
    another thread count) or a quantization-sized one can
    move a probe to the other side of a near-tie — measured: the same global model to
    6e-8, one region's model 6.7e-5 apart. The golden-section exchanges on Flower are
    checked against in-process on flower-sim (global model and α)."""
    import torch

    from regionfed.config import build_config
    from regionfed.data.registry import build_federation
    from regionfed.experiment import run_method
    from regionfed.models.registry import build_task
    from regionfed.runtime.evaluation import FederationEvaluator
    from regionfed.runtime.flower.deployment import run_flower_deployment

    settings = {"data": {"num_queries": 480, "num_regions": 2, "clients_per_region": 2,
                         "vocab_size": 1000},
                "model": {"dim": 32, "heads": 2, "ngram_buckets": 512},
                "training": {"rounds": 2, "eval_every": 2, "client_batching": "off",
                             "optimizer": {"name": "sgd", "lr": 0.1}},
                "methods": [method], "regionfed": {"rho_search": False}}
    local_config = build_config(settings)
    federation = build_federation(local_config.dataset, local_config.data)
    task = build_task(local_config.model, federation)
    _, local = run_method(method, federation, task, local_config, 0,
                          FederationEvaluator(task, federation))
    config = build_config({**settings, "runtime": "flower",
                           "flower": {"superlink": deployment.address,
                                      "run_timeout_s": 300, "reply_timeout_s": 120,
                                      "secagg": {"enabled": secagg, "min_clients": 2}}})
    remote, _ = run_flower_deployment(config, method, 0)
    assert all("faults" not in entry for entry in remote.history)  # no region skipped
    # every update went through one SecAgg+ protocol per region (2 clients each), or none
    expected = {r: [2] for r in ("region_00", "region_01")} if secagg else None
    assert all(entry.get("secagg") == expected for entry in remote.history)
    assert torch.allclose(remote.final_params, local.final_params, atol=1e-5)
    assert set(remote.regional_params) == set(local.regional_params)
    for region, params in local.regional_params.items():
        assert torch.allclose(remote.regional_params[region], params, atol=1e-5), region
    assert remote.test["overall"] == pytest.approx(local.test["overall"], abs=1e-3)


def test_a_run_that_outlives_its_timeout_is_stopped_on_the_superlink(superlink, tmp_path,
                                                                      capsys):
    # 100 rounds need well over a minute; the submitter gives up after 10 s and must not
    # leave the ServerApp running on the SuperLink — and the nodes must serve the next run
    # (a warm node could otherwise keep the stopped run's last reply and stay one reply
    # behind for good: warm.DroppedRuns)
    code = main(["run", "--runtime", "flower", "--superlink", superlink,
                 "--methods", "fedavg", *SMALL, "--rounds", "100",
                 "--set", "flower.run_timeout_s=10", "--out", str(tmp_path / "run")])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did not finish within 10 s" in err[0]
    assert "was stopped on the SuperLink" in err[0]
    code = main(["run", "--runtime", "flower", "--superlink", superlink,
                 "--methods", "fedavg", *SMALL, "--out", str(tmp_path / "next")])
    assert code == 0, capsys.readouterr().err
