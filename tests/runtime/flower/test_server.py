"""The Flower server screens replies like the in-process simulator: a NaN/Inf or misshapen
reply is rejected and logged, the round aggregates the others, nothing fails."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from regionfed.algorithms.base import ClientResult, FederationView  # noqa: E402
from regionfed.algorithms.fedavg import FedAvg  # noqa: E402
from regionfed.runtime.flower.codec import decode_instruction, encode_result  # noqa: E402
from regionfed.runtime.flower.server import FlowerDriver  # noqa: E402

CLIENTS = {"good": "us", "nan-update": "us", "nan-loss": "de", "wrong-shape": "de"}


class ScriptedDriver(FlowerDriver):
    """A driver whose nodes are a script: each client replies update = its index + 1,
    except the poisoned ones (no Flower grid involved)."""

    def __init__(self) -> None:  # noqa: D107 - no grid, no discovery
        from regionfed.config import SecAggConfig

        self.node_of = {c: i for i, c in enumerate(CLIENTS)}
        self.secagg = SecAggConfig()  # off: every reply comes through _send

    def _send(self, messages):
        replies = []
        for message in messages:
            ins = decode_instruction(message.content)
            update = torch.full_like(ins.params, 1.0)
            loss = 0.5
            if ins.client_id == "nan-update":
                update[0] = float("nan")
            if ins.client_id == "nan-loss":
                loss = float("nan")
            if ins.client_id == "wrong-shape":
                update = torch.ones(3)
            result = ClientResult(ins.client_id, ins.region, update, 10, {"train_loss": loss})
            replies.append(SimpleNamespace(content=encode_result(result)))
        return replies


def test_poisoned_replies_are_rejected_and_the_round_goes_on(monkeypatch):
    import flwr.app

    # a real Message needs a running Flower app (its run id); the script only reads content
    monkeypatch.setattr(flwr.app, "Message",
                        lambda content, **meta: SimpleNamespace(content=content, **meta))
    strategy = FedAvg()
    view = FederationView(regions=("us", "de"), client_region=dict(CLIENTS),
                          num_examples=dict.fromkeys(CLIENTS, 10))
    strategy.setup(torch.zeros(5), view, np.random.default_rng(0))
    log, losses = ScriptedDriver()._round(strategy, 1)
    assert log["faults"]["rejected"] == {"nan-loss": "non-finite train_loss",
                                         "nan-update": "update with NaN/Inf values",
                                         "wrong-shape": "update of shape (3,), expected (5,)"}
    assert losses == [0.5]  # only the good client's reply was used
    assert torch.isfinite(strategy.params).all() and not torch.equal(strategy.params,
                                                                     torch.zeros(5))


@pytest.mark.parametrize(("sigma", "validations"), [(0.0, ["val", "val", "test"]),
                                                    (1.0, ["test"])])
def test_under_dp_the_server_collects_no_per_round_validation(monkeypatch, sigma,
                                                              validations):
    """Per-round validation would send every client's un-noised scores to the server: the
    Flower driver skips it under DP (the final test scores are the experiment's result),
    and the ledger gets exactly what the strategy's mechanism recorded."""
    import flwr.app
    from torch import nn

    from regionfed.config import TrainingConfig
    from regionfed.privacy.ledger import PrivacyLedger
    from regionfed.privacy.mechanism import DPConfig

    monkeypatch.setattr(flwr.app, "Message",
                        lambda content, **meta: SimpleNamespace(content=content, **meta))
    driver = ScriptedDriver()
    driver.model, driver.seed = nn.Linear(2, 2), 0
    driver.view = FederationView(regions=("us",), client_region={"good": "us"},
                                 num_examples={"good": 10})
    driver.node_of = {"good": 0}
    driver.training = TrainingConfig(rounds=2, eval_every=1)
    asked = []
    monkeypatch.setattr(ScriptedDriver, "evaluate",
                        lambda self, strategy, split: asked.append(split) or {})
    dp = DPConfig(mode="user", sigma=sigma, clip=1.0)
    ledger = PrivacyLedger(dp, 1.0)
    run = driver.run(FedAvg(dp=dp), ledger=ledger)
    assert asked == validations
    assert ledger.rounds == 2 and ledger.releases == 2
    # the scripted nodes send their training loss anyway: under DP it is not logged
    assert ("train_loss" in run.history[0]) is (sigma == 0.0)


def test_a_client_side_evaluation_request_carries_the_regional_model():
    """regionfed-plus's clients choose among global, regional and personal models on their
    own node: the request carries the global model and the client's regional model; a
    method evaluated on the server sends only the parameters to score."""
    from regionfed.algorithms.regionfed.config import RegionFedPlusConfig
    from regionfed.algorithms.regionfed.plus import RegionFedPlus
    from regionfed.runtime.flower.server import (
        evaluation_request,
        evaluation_state,
        params_tensor,
    )

    view = FederationView(regions=("us", "de"), client_region=dict(CLIENTS),
                          num_examples=dict.fromkeys(CLIENTS, 10))
    plus = RegionFedPlus()
    plus.setup(torch.zeros(5), view, np.random.default_rng(0))
    plus.offsets["de"] += 2.0  # α = 1 until shrinkage runs: θ_de = θ + 2
    content = evaluation_request(plus, "nan-loss", "de", "val")
    assert torch.equal(params_tensor(content), torch.zeros(5))
    assert set(evaluation_state(content)) == {"regional"}
    assert torch.equal(evaluation_state(content)["regional"], torch.full((5,), 2.0))
    assert content["meta"]["on_client"]
    flat = RegionFedPlus(RegionFedPlusConfig(two_level=False))
    flat.setup(torch.zeros(5), view, np.random.default_rng(0))
    flat.offsets["de"] += 2.0
    content = evaluation_request(flat, "nan-loss", "de", "val")  # scored on the server
    assert torch.equal(params_tensor(content), torch.full((5,), 2.0))
    assert evaluation_state(content) == {} and not content["meta"]["on_client"]


class SlowGrid:
    """A grid whose nodes answer after ``delays[i]`` pulls of message ``i``."""

    def __init__(self, delays):
        self.delays = delays
        self.pulls = 0

    def push_messages(self, messages):
        self.sent = list(messages)
        return [m.metadata.message_id for m in self.sent]

    def pull_messages(self, ids):
        self.pulls += 1
        return [SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=m.metadata.message_id))
                for m, after in zip(self.sent, self.delays, strict=True)
                if m.metadata.message_id in ids and after == self.pulls]


def _messages(n):
    return [SimpleNamespace(metadata=SimpleNamespace(message_id=f"m{i}")) for i in range(n)]


def test_exchange_polls_briefly_until_every_reply_is_in():
    from regionfed.runtime.flower.server import LONGEST_POLL_S, exchange

    grid, pauses = SlowGrid([1, 3, 6]), []
    replies = exchange(grid, _messages(3), timeout=60, sleep=pauses.append)
    assert sorted(r.metadata.reply_to_message_id for r in replies) == ["m0", "m1", "m2"]
    assert grid.pulls == 6  # stops at the last reply, not after a fixed sleep
    assert pauses and max(pauses) <= LONGEST_POLL_S and sum(pauses) < 1.0  # not 3 s a pull


def test_exchange_returns_what_came_by_the_deadline():
    from regionfed.runtime.flower.server import exchange

    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    grid = SlowGrid([1, 10**9])  # the second node never answers
    replies = exchange(grid, _messages(2), timeout=2.0, sleep=sleep, clock=lambda: now[0])
    assert [r.metadata.reply_to_message_id for r in replies] == ["m0"]
    assert 2.0 <= now[0] < 2.3  # waited for the deadline, not beyond
