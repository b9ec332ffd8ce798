"""Round checkpoints: a run resumed from its checkpoint after any round reaches exactly the
uninterrupted run's result (every federated method, DP on so the noise generator and the
ledger are part of it); foreign or corrupt checkpoints are refused."""

import json
import shutil

import pytest
import torch

from regionfed.algorithms.registry import METHODS, build_strategy
from regionfed.config import build_config
from regionfed.privacy.ledger import PrivacyLedger
from regionfed.runtime.round_checkpoint import RoundCheckpoints, run_identity
from regionfed.runtime.simulator import Simulator
from regionfed.runtime.state import CheckpointError

FEDERATED = [name for name, spec in METHODS.items() if spec.kind == "federated"]
CONFIG = build_config({"training": {"rounds": 3, "eval_every": 1, "local_epochs": 1,
                                    "batch_size": 32, "sample_rate": 0.7},
                       "dp": {"mode": "user", "sigma": 0.5, "clip": 1.0},
                       "regionfed": {"rho_tolerance": 0.2}})


def config_for(method):
    """DP on, unless the method has no user-level DP guarantee (FedTP): then off."""
    from regionfed.errors import MethodNotApplicableError

    try:
        build_strategy(method, CONFIG)
    except MethodNotApplicableError:
        return CONFIG.model_copy(update={"dp": CONFIG.dp.model_copy(update={"mode": "off"})})
    return CONFIG


def run(method, federation, task, checkpoints=None):
    config = config_for(method)
    strategy = build_strategy(method, config)
    ledger = PrivacyLedger(config.dp, config.training.sample_rate)
    result = Simulator(federation, task, config.training, seed=0).run(
        strategy, ledger=ledger, checkpoints=checkpoints)
    return result, ledger


@pytest.mark.parametrize("method", FEDERATED)
def test_a_resumed_run_is_the_uninterrupted_run(method, tiny_federation, tiny_task, tmp_path):
    identity = run_identity(method, 0, config_for(method).to_yaml())
    path = tmp_path / "state.safetensors"
    after_first = tmp_path / "after-round-1.safetensors"


    checkpoints = RoundCheckpoints(path, identity)
    original = checkpoints.save

    def save_and_copy(rnd, *args):
        original(rnd, *args)
        if rnd == 1:
            shutil.copy(path, after_first)

    checkpoints.save = save_and_copy
    whole, whole_ledger = run(method, tiny_federation, tiny_task, checkpoints)
    for saved in (path, after_first):  # resume after round 2, and after round 1
        resumed, ledger = run(method, tiny_federation, tiny_task,
                              RoundCheckpoints(saved, identity))
        assert torch.equal(resumed.final_params, whole.final_params)
        assert resumed.test["overall"] == whole.test["overall"]
        assert resumed.test["per_client"] == whole.test["per_client"]
        assert [h["round"] for h in resumed.history] == [1, 2, 3]
        assert resumed.history == whole.history
        assert ledger.epsilon() == whole_ledger.epsilon()
        assert ledger.to_dict() == whole_ledger.to_dict()


def test_a_checkpoint_of_another_run_is_refused(tiny_federation, tiny_task, tmp_path):
    path = tmp_path / "state.safetensors"
    run("fedavg", tiny_federation, tiny_task,
        RoundCheckpoints(path, run_identity("fedavg", 0, CONFIG.to_yaml())))
    other_config = run_identity("fedavg", 0, CONFIG.to_yaml() + "# changed\n")
    with pytest.raises(CheckpointError, match="belongs to another run"):
        run("fedavg", tiny_federation, tiny_task, RoundCheckpoints(path, other_config))
    with pytest.raises(CheckpointError, match="FedProx"):
        run("fedprox", tiny_federation, tiny_task,
            RoundCheckpoints(path, run_identity("fedavg", 0, CONFIG.to_yaml())))


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_a_corrupt_checkpoint_is_refused(damage, tiny_federation, tiny_task, tmp_path):
    path = tmp_path / "state.safetensors"
    identity = run_identity("fedavg", 0, CONFIG.to_yaml())
    run("fedavg", tiny_federation, tiny_task, RoundCheckpoints(path, identity))
    data = path.read_bytes()
    path.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"\x00" * 64 + data[64:],
                      "empty": b""}[damage])
    with pytest.raises(CheckpointError, match="corrupt"):
        run("fedavg", tiny_federation, tiny_task, RoundCheckpoints(path, identity))


def test_a_resumed_run_reports_the_time_of_every_invocation(tiny_federation, tiny_task,
                                                            tmp_path):
    """The checkpoint carries the run time up to its round; ``run_method`` of the resumed
    run adds it to its own, so ``seconds`` is not only the last invocation's."""
    from safetensors import safe_open

    from regionfed.experiment import run_method
    from regionfed.io import save_checkpoint
    from regionfed.runtime.evaluation import FederationEvaluator

    path = tmp_path / "state.safetensors"
    identity = run_identity("fedavg", 0, CONFIG.to_yaml())
    run("fedavg", tiny_federation, tiny_task, RoundCheckpoints(path, identity))
    with safe_open(str(path), framework="pt") as handle:
        tree = json.loads(handle.metadata()["regionfed"])
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}
    assert tree["elapsed_seconds"] > 0.0
    tree["elapsed_seconds"] = 5000.0  # as if the first invocation had trained for 5,000 s
    save_checkpoint(path, tensors, {"regionfed": json.dumps(tree)})

    checkpoints = RoundCheckpoints(path, identity)
    outcome, _ = run_method("fedavg", tiny_federation, tiny_task, CONFIG, 0,
                            FederationEvaluator(tiny_task, tiny_federation),
                            checkpoints=checkpoints)
    assert checkpoints.seconds_before_resume == 5000.0
    assert 5000.0 < outcome.seconds < 5000.0 + 600.0


def test_one_tensor_held_by_many_clients_is_written_once():
    """regionfed-plus hands every client the same initial model as its personal start: a
    checkpoint of 8,000 such clients must not write 8,000 copies of it."""
    from regionfed.runtime.state import capture_value, load_value

    shared, own = torch.arange(4.0), torch.ones(4)
    clients = {"a": {"personal": shared}, "b": {"personal": shared}, "c": {"personal": own}}
    tree, tensors = capture_value(clients)
    assert len(tensors) == 2
    loaded = load_value(tree, tensors)
    assert all(torch.equal(loaded[c]["personal"], clients[c]["personal"]) for c in clients)
