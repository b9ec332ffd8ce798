"""Architecture-agnostic algorithms (issue 7): the same strategies, unchanged, on every model;
the algorithms package never imports the models package."""

import ast
from pathlib import Path

import pytest
import torch
from helpers import shared_data

import regionfed.algorithms
from regionfed.algorithms.registry import build_strategy
from regionfed.config import TrainingConfig, build_config
from regionfed.data.federation import ClientData, Federation
from regionfed.models.minilm import MiniLMConfig
from regionfed.models.registry import build_task
from regionfed.models.t5 import T5ModelConfig
from regionfed.runtime.simulator import Simulator

FEMNIST = shared_data("femnist", "femnist_leaf_sf05_subset.npz")


def _imports(path: Path) -> list[str]:
    return [name for node in ast.walk(ast.parse(path.read_text()))
            for name in ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])]


def test_algorithms_import_nothing_from_models():
    root = Path(regionfed.algorithms.__file__).parent
    offenders = [f"{path.name}: {n}" for path in root.rglob("*.py") for n in _imports(path)
                 if n.startswith(("regionfed.models", "regionfed.runtime"))]
    assert not offenders


def test_the_runtimes_import_nothing_above_them():
    """runtime/ (the simulator, batched training, threads, the worker pool, the Flower
    runtimes) sits below the experiment bookkeeping, the studies and the CLI: a runtime gets
    its strategy from the algorithms' registry, never from experiment.py."""
    import regionfed.runtime

    upper = ("regionfed.experiment", "regionfed.studies", "regionfed.cli", "regionfed.report",
             "regionfed.tuning", "regionfed.audit")
    offenders = [f"{path.name}: {name}"
                 for path in Path(regionfed.runtime.__file__).parent.rglob("*.py")
                 for name in _imports(path) if name.startswith(upper)]
    assert not offenders


def test_experiment_trains_only_through_the_runtime_seam():
    """experiment.py keeps run folders; training a federated method goes through
    ``runtime_for(...).run(...)`` (runtime/runtimes.py): it builds no simulator and reaches
    into no Flower runtime itself (negative control: an ``import Simulator`` fails this)."""
    import regionfed.experiment

    path = Path(regionfed.experiment.__file__)
    imported = _imports(path)
    assert "regionfed.runtime.runtimes" in imported
    assert not [n for n in imported if n.startswith("regionfed.runtime.flower")]
    tree = ast.parse(path.read_text())
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
             for alias in node.names}
    assert not names & {"Simulator", "build_strategy", "run_flower_simulation",
                        "run_flower_deployment"}


def _cnn_on_femnist():
    from regionfed.data.femnist import load_femnist
    from regionfed.models.image_task import ImageClassificationTask

    if not FEMNIST.exists():
        pytest.skip(f"{FEMNIST} not present")
    return load_femnist(path=str(FEMNIST), num_regions=2, max_writers=6), \
        ImageClassificationTask(62)


_TEXT_MODELS = {"t5-tiny": T5ModelConfig(d_model=32, d_ff=64, num_heads=2, vocab_size=2048),
                "minilm": MiniLMConfig()}
_TEXT_TASKS: dict = {}


def _query_model(model, tiny_federation, tiny_task):
    if model == "tiny":
        return tiny_federation, tiny_task
    if model not in _TEXT_TASKS:  # built once: the tokenizer / pretrained load is shared
        _TEXT_TASKS[model] = build_task(_TEXT_MODELS[model], tiny_federation)
    # the 22.7M-parameter minilm gets one client per region and 8 queries per split, to stay
    # fast on CPU
    return (_shrunk(tiny_federation, 8) if model == "minilm" else tiny_federation,
            _TEXT_TASKS[model])


def _shrunk(federation, n):
    """The first client of each region, with at most ``n`` queries per split."""
    firsts = [next(c for c in federation.clients if c.region == r) for r in federation.regions]
    clients = [ClientData(c.client_id, c.region, c.train.subset(range(n)),
                          c.val.subset(range(min(n, len(c.val)))),
                          c.test.subset(range(min(n, len(c.test)))))
               for c in firsts]
    return Federation(federation.name, federation.regions, clients, federation.meta)


@pytest.mark.parametrize("model", ["tiny", "t5-tiny", "minilm", "cnn"])
@pytest.mark.parametrize("method", ["fedavg", "regionfed-grad", "regionfed-meta"])
def test_every_model_runs_the_same_strategies(model, method, tiny_federation, tiny_task):
    federation, task = (_cnn_on_femnist() if model == "cnn"
                        else _query_model(model, tiny_federation, tiny_task))
    training = TrainingConfig(rounds=1, local_epochs=1, batch_size=32, eval_every=1)
    # minilm skips ρ's line search (half its run; searched on the other models)
    search = {"regionfed": {"rho_search": False}} if model == "minilm" else {}
    strategy = build_strategy(method, build_config({"methods": [method], **search}))
    run = Simulator(federation, task, training, seed=0).run(strategy)
    assert torch.isfinite(run.final_params).all()
    assert 0.0 <= run.test["overall"] <= 1.0
