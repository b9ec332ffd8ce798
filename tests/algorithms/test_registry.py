"""Every registered method runs through the same code path and reports finite results."""

import math

import pytest

from regionfed.algorithms.registry import METHODS, build_strategy, get_method
from regionfed.config import build_config
from regionfed.errors import MethodNotApplicableError
from regionfed.experiment import run_method
from regionfed.runtime.evaluation import FederationEvaluator
from regionfed.tuning import DEFAULT_GRIDS

FEDERATED = [m for m, spec in METHODS.items() if spec.kind == "federated"]
SMALL = {"training": {"rounds": 1, "eval_every": 1},
         "model": {"dim": 32, "heads": 2, "ffn_dim": 64, "ngram_buckets": 512}}


@pytest.mark.parametrize("method", FEDERATED)
def test_every_federated_method_runs_a_round(method, tiny_federation, tiny_task):
    config = build_config({**SMALL, "methods": [method]})
    outcome, run = run_method(method, tiny_federation, tiny_task, config, 0,
                              FederationEvaluator(tiny_task, tiny_federation))
    assert math.isfinite(outcome.test["overall"]) and 0.0 <= outcome.test["overall"] <= 1.0
    assert run.final_params.isfinite().all()
    assert set(outcome.test["per_client"]) == {c.client_id for c in tiny_federation.clients}


@pytest.mark.parametrize("method", FEDERATED)
def test_under_dp_a_method_is_private_or_says_why_not(method):
    config = build_config({**SMALL, "methods": [method],
                           "dp": {"mode": "user", "sigma": 1.0, "clip": 1.0}})
    if method == "fedtp":
        with pytest.raises(MethodNotApplicableError, match="DP"):
            build_strategy(method, config)
    else:
        assert build_strategy(method, config).dp.mode == "user"


def test_key_hyperparameters_are_real_config_keys():
    config = build_config({}).model_dump()
    for name, spec in METHODS.items():
        if spec.key_hyperparameter:
            section, key = spec.key_hyperparameter.split(".")
            assert key in config[section], name
            assert spec.key_hyperparameter in DEFAULT_GRIDS, name  # fair tuning searches it
    assert get_method("fedprox").key_hyperparameter == "baselines.fedprox_mu"
