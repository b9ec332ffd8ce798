"""Architecture-agnostic algorithms (issue 7): the same strategies, unchanged, on every model;
the algorithms package never imports the models package."""

import ast
from pathlib import Path

import pytest
import torch
from helpers import shared_data

import regionfed.algorithms
from regionfed.config import TrainingConfig, build_config
from regionfed.experiment import build_strategy
from regionfed.runtime.simulator import Simulator

FEMNIST = shared_data("femnist", "femnist_leaf_sf05_subset.npz")


def test_algorithms_import_nothing_from_models():
    root = Path(regionfed.algorithms.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {n}" for n in names
                          if n.startswith(("regionfed.models", "regionfed.runtime"))]
    assert not offenders


def _cnn_on_femnist():
    from regionfed.data.femnist import load_femnist
    from regionfed.models.image_task import ImageClassificationTask

    if not FEMNIST.exists():
        pytest.skip(f"{FEMNIST} not present")
    return load_femnist(path=str(FEMNIST), num_regions=2, max_writers=6), \
        ImageClassificationTask(62)


def _tiny_on_esci_synth(tiny_federation, tiny_task):
    return tiny_federation, tiny_task


@pytest.mark.parametrize("model", ["tiny", "cnn"])
@pytest.mark.parametrize("method", ["fedavg", "regionfed-grad", "regionfed-meta"])
def test_every_model_runs_the_same_strategies(model, method, tiny_federation, tiny_task):
    federation, task = (_tiny_on_esci_synth(tiny_federation, tiny_task) if model == "tiny"
                        else _cnn_on_femnist())
    training = TrainingConfig(rounds=1, local_epochs=1, batch_size=32, eval_every=1)
    strategy = build_strategy(method, build_config({"methods": [method]}))
    run = Simulator(federation, task, training, seed=0).run(strategy)
    assert torch.isfinite(run.final_params).all()
    assert 0.0 <= run.test["overall"] <= 1.0
