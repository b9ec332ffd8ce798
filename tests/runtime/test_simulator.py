import threading
from typing import Any

import pytest
import torch

from regionfed.algorithms.base import ClientResult, SingleExchangeStrategy
from regionfed.algorithms.fedavg import FedAvg
from regionfed.algorithms.local import LocalOnly
from regionfed.config import TrainingConfig
from regionfed.data.esci_synth import generate_esci_synth
from regionfed.runtime.local_training import OptimizerConfig
from regionfed.runtime.params import get_flat
from regionfed.runtime.simulator import GRADIENTS_ONE_BY_ONE, Simulator

FAST = TrainingConfig(rounds=2, local_epochs=1, batch_size=32, eval_every=1)


def test_runs_are_deterministic_and_logged(tiny_federation, tiny_task):
    a = Simulator(tiny_federation, tiny_task, FAST, seed=0).run(FedAvg())
    b = Simulator(tiny_federation, tiny_task, FAST, seed=0).run(FedAvg())
    c = Simulator(tiny_federation, tiny_task, FAST, seed=1).run(FedAvg())
    assert torch.equal(a.final_params, b.final_params)
    assert not torch.equal(a.final_params, c.final_params)
    assert [h["round"] for h in a.history] == [1, 2]
    assert all("val" in h and h["clients"] == 6 for h in a.history)
    assert set(a.test["per_region"]) == set(tiny_federation.regions)
    assert 0.0 <= a.test["overall"] <= 1.0
    assert a.test["worst_region"] == min(a.test["per_region"].values())


def test_the_last_validation_and_the_test_scores_ask_each_clients_model_once(
        tiny_federation, tiny_task):
    class Counting(FedAvg):
        asked: list[str] = []

        def eval_params(self, client_id, region, client):
            if client is not None:  # not the run's summary of each region's model
                self.asked.append(client_id)
            return super().eval_params(client_id, region, client)

    strategy = Counting()
    sim = Simulator(tiny_federation, tiny_task, FAST, seed=0)
    run = sim.run(strategy)
    clients = [c.client_id for c in tiny_federation.clients]
    # round 1's validation, then one pass for round 2's validation and the test scores
    assert sorted(strategy.asked) == sorted(clients * 2)
    assert run.history[-1]["val"]["overall"] == sim.evaluate(strategy, "val")["overall"]
    assert run.test["overall"] == sim.evaluate(strategy, "test")["overall"]


def test_a_repeatable_stream_draws_its_first_batches_every_time(tiny_federation, tiny_task):
    sim = Simulator(tiny_federation, tiny_task, FAST, seed=0)
    client = next(iter(sim.clients.values()))
    start = get_flat(sim.model)
    first, _ = client.train(start, stream="s", repeatable=True)
    again, _ = client.train(start, stream="s", repeatable=True)
    counted, _ = client.train(start, stream="s")  # the repeatable calls were not counted
    moved, _ = client.train(start, stream="s")
    assert torch.equal(first, again) and torch.equal(first, counted)
    assert not torch.equal(first, moved)
    assert client.train_calls == {"s": 2}


def test_a_clients_validation_jackknife_is_its_score_without_each_query(tiny_federation,
                                                                        tiny_task):
    sim = Simulator(tiny_federation, tiny_task, FAST, seed=0)
    client = next(c for c in sim.clients.values() if len(c.data.val) >= 3)
    params = get_flat(sim.model)
    replicates = client.validation_leave_one_out(params)
    n = len(client.data.val)
    assert len(replicates) == n
    score_sum, count = client.validation_score(params)
    # the jackknife of a score averages back to about the score itself
    assert count == n and abs(float(replicates.mean()) - score_sum / n) < 0.1
    rest = client.data.val.subset(list(range(1, n)))
    assert replicates[0] == pytest.approx(
        tiny_task.evaluate(sim.model, rest)["overall"])


def test_fedavg_with_one_client_is_local_training(tiny_task):
    one = generate_esci_synth(num_queries=120, num_regions=1, clients_per_region=1,
                              vocab_size=1000, seed=3)
    # SGD: θ − (θ − θ_u) = θ_u only up to rounding, which Adam's normalisation would amplify
    sgd = FAST.model_copy(update={"optimizer": OptimizerConfig(name="sgd", lr=0.1)})
    fed = Simulator(one, tiny_task, sgd, seed=0).run(FedAvg())
    local_sim = Simulator(one, tiny_task, sgd, seed=0)
    local_sim.run(LocalOnly())
    client = local_sim.clients[one.clients[0].client_id]
    assert torch.allclose(fed.final_params, client.state["params"], atol=1e-5)
    assert not torch.allclose(fed.final_params, get_flat(tiny_task.build_model(0)), atol=1e-3)


class PoisonedFedAvg(FedAvg):
    def client_train(self, instruction, client) -> ClientResult:
        result = super().client_train(instruction, client)
        result.update[0] = float("nan")
        return result


def test_nan_updates_are_rejected_and_the_model_stays_finite(tiny_federation, tiny_task):
    run = Simulator(tiny_federation, tiny_task, FAST, seed=0).run(PoisonedFedAvg())
    assert torch.isfinite(run.final_params).all()
    rejected = run.history[0]["faults"]["rejected"]
    assert len(rejected) == len(tiny_federation.clients)  # every client was poisoned
    assert set(rejected.values()) == {"update with NaN/Inf values"}
    assert run.history[0]["clients"] == 0  # nothing was aggregated


class CountingStrategy(SingleExchangeStrategy):
    """Records which clients the runtime trained, to check sampling is honoured."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.seen: list[int] = []

    def aggregate_train(self, rnd, results):
        self.seen.append(len(results))
        return {"clients": len(results)}


def test_client_sampling_rate_is_honoured(tiny_federation, tiny_task):
    strategy = CountingStrategy(sample_rate=0.5)
    config = TrainingConfig(rounds=6, eval_every=6)
    Simulator(tiny_federation, tiny_task, config, seed=0).run(strategy)
    assert len(strategy.seen) == 6
    assert 0 < sum(strategy.seen) < 36  # Poisson(0.5) over 6 clients × 6 rounds


@pytest.mark.parametrize("score", [False, True])
def test_shared_validation_shortcut_matches_per_client_replies(tiny_federation, tiny_task,
                                                               score):
    from regionfed.algorithms.base import EVALUATE, TrainInstruction
    from regionfed.algorithms.regionfed import RegionFed

    sim = Simulator(tiny_federation, tiny_task, FAST, seed=0)
    strategy = RegionFed("grad")
    params = get_flat(sim.model) + 0.01
    config = {"score": True} if score else {}
    instructions = [TrainInstruction(c.client_id, c.region, params, dict(config), EVALUATE)
                    for c in tiny_federation.clients]
    fast = sim._shared_validation_losses(instructions)
    assert set(fast) == set(range(len(instructions)))
    for i, ins in enumerate(instructions):
        slow = strategy.handle(ins, sim.clients[ins.client_id])
        assert fast[i].num_examples == slow.num_examples > 0
        assert fast[i].metrics["loss_sum"] == pytest.approx(slow.metrics["loss_sum"], rel=1e-4)
        if score:
            assert fast[i].metrics["score_sum"] == pytest.approx(slow.metrics["score_sum"])


def test_one_member_ensemble_evaluates_like_its_member(tiny_federation, tiny_task):
    from regionfed.algorithms.base import Ensemble
    sim = Simulator(tiny_federation, tiny_task, FAST, seed=0)
    params = get_flat(sim.model)
    plain = sim.evaluate_with(lambda c: params, "val")
    voted = sim.evaluate_with(lambda c: Ensemble((params, params), (0.3, 0.7)), "val")
    assert voted["overall"] == pytest.approx(plain["overall"])
    assert voted["per_client"] == pytest.approx(plain["per_client"])
    with pytest.raises(ValueError, match="weights"):
        Ensemble((params,), (-1.0,))


@pytest.mark.parametrize("method", ["fedavg", "regionfed-meta", "regionfed-interp", "local",
                                    "fedprox", "ditto", "regionfed-plus", "fedbabu", "fedrep",
                                    "apfl", "pfedme"])
def test_batched_clients_give_the_sequential_result(tiny_federation, tiny_task, method):
    from regionfed.algorithms.registry import build_strategy
    from regionfed.config import RunConfig

    # SGD: AdamW's normalisation turns float noise in analytically-zero gradients (the key
    # bias cancels in the softmax) into lr-sized steps, so it agrees only in the metrics
    runs = {}
    for mode in ("off", "on"):
        training = FAST.model_copy(update={
            "client_batching": mode, "max_batched_clients": 4,
            "optimizer": OptimizerConfig(name="sgd", lr=0.1, momentum=0.5)})
        runs[mode] = Simulator(tiny_federation, tiny_task, training, seed=0).run(
            build_strategy(method, RunConfig(methods=[method])))
    assert runs["off"].history[0]["client_batching"].startswith("sequential")
    said = runs["on"].history[0]["client_batching"]
    if method in ("regionfed-meta", "apfl"):  # their full-data gradients: one by one on a CPU
        assert said.startswith("partly batched") and GRADIENTS_ONE_BY_ONE in said
    else:
        assert said == "batched"
    assert torch.allclose(runs["on"].final_params, runs["off"].final_params, atol=1e-5)
    assert runs["on"].test["overall"] == pytest.approx(runs["off"].test["overall"], abs=0.01)


def test_batching_on_an_accelerator_is_opt_in(tiny_federation, tiny_task, monkeypatch):
    """``auto`` spreads clients over processes on the CPU only, and there only with two or
    more torch threads (on one the sequential loop is as fast); ``on`` batches wherever the
    model is (the batched trainer computes on the model's device); ``processes`` is for the
    CPU; ``off`` never."""
    from regionfed.algorithms.fedavg import FedAvg

    modes = {}
    for threads in (2, 1):
        monkeypatch.setattr(torch, "get_num_threads", lambda threads=threads: threads)
        for mode in ("auto", "on", "off", "processes"):
            sim = Simulator(tiny_federation, tiny_task,
                            FAST.model_copy(update={"client_batching": mode}), seed=0)
            modes[mode, "cpu", threads] = sim.batching_mode(FedAvg())
            sim.device = torch.device("cuda")  # what an accelerator run decides (no GPU)
            modes[mode, "cuda", threads] = sim.batching_mode(FedAvg())
    assert modes["auto", "cpu", 1].startswith("sequential (one torch thread")
    assert modes["on", "cpu", 1] == "batched"
    # forced at one thread: one worker beside this process
    assert modes["processes", "cpu", 1] == "processes (2 processes, one torch thread each)"
    modes = {key[:2]: mode for key, mode in modes.items() if key[2] == 2}
    assert modes["auto", "cpu"] == modes["processes", "cpu"] \
        == "processes (2 processes, one torch thread each)"
    assert modes["on", "cpu"] == modes["on", "cuda"] == "batched"
    assert modes["processes", "cuda"].startswith("sequential (client_batching processes is "
                                                 "for the CPU")
    assert modes["auto", "cuda"].startswith("sequential (batching on cuda is opt-in")
    assert "client_batching=on" in modes["auto", "cuda"]
    assert modes["off", "cpu"] == modes["off", "cuda"] == "sequential (client_batching off)"


def test_a_client_step_whose_calls_cannot_be_batched_says_why(tiny_federation, tiny_task):
    """SCAFFOLD's correction is an extra loss the batched trainer does not know: one by one,
    and the log says so; FedBABU (a frozen mask) and local training (its own step) batch."""
    from regionfed.algorithms.fedbabu import FedBABU
    from regionfed.algorithms.scaffold import Scaffold

    def first_round(strategy):
        training = FAST.model_copy(update={"client_batching": "on"})
        sim = Simulator(tiny_federation, tiny_task, training, seed=0)
        return sim.run(strategy).history[0]["client_batching"]

    assert first_round(Scaffold()) == \
        "sequential (scaffold's client step trains with a custom extra loss)"
    assert first_round(FedBABU()) == first_round(LocalOnly()) == "batched"


def test_the_round_log_says_how_much_was_batched():
    from collections import Counter

    say = Simulator.round_batching
    assert say("batched", "x", Counter(train=8), Counter()) == "batched"
    assert say("sequential (client_batching off)", "x", Counter(), Counter()) \
        == "sequential (client_batching off)"
    assert say("batched", "ditto", Counter(train=6), Counter({"a custom extra loss": 2})) \
        == "partly batched (2 of 8 calls one by one: a custom extra loss)"
    assert say("batched", "scaffold", Counter(), Counter({"a custom extra loss": 3})) \
        == "sequential (scaffold's client step trains with a custom extra loss)"
    assert say("processes (2 processes, one torch thread each)", "ditto", Counter(train=6),
               Counter({"a custom extra loss": 2})) \
        == "partly in processes (2 of 8 calls one by one: a custom extra loss)"


def test_a_run_keeps_each_regions_model_where_it_differs_from_the_global(tiny_federation,
                                                                          tiny_task):
    from regionfed.algorithms.ditto import Ditto
    from regionfed.algorithms.regionfed import RegionFed, RegionFedConfig

    regional = Simulator(tiny_federation, tiny_task, FAST, seed=0).run(
        RegionFed("grad", RegionFedConfig(rho_search=False)))
    assert set(regional.regional_params) == set(tiny_federation.regions)
    first, second = (regional.regional_params[r] for r in tiny_federation.regions)
    assert not torch.allclose(first, second)
    assert not torch.allclose(first, regional.final_params)
    # one global model, or one model per client: no regional model to keep
    assert Simulator(tiny_federation, tiny_task, FAST, seed=0).run(FedAvg()
                                                                   ).regional_params == {}
    assert Simulator(tiny_federation, tiny_task, FAST, seed=0).run(Ditto()
                                                                   ).regional_params == {}


@pytest.fixture
def gradient_sizes(monkeypatch):
    """The batch size of every full-data gradient the simulator computes one by one."""
    from regionfed.runtime import simulator as simulator_module

    sizes = []
    real = simulator_module.mean_gradient

    def recording(task, model, params, prepared, batch_size):
        sizes.append(batch_size)
        return real(task, model, params, prepared, batch_size)

    monkeypatch.setattr(simulator_module, "mean_gradient", recording)
    return sizes


def test_a_clients_full_gradient_does_not_depend_on_gradient_batch_size(
        tiny_federation, tiny_task, gradient_sizes):
    """``training.gradient_batch_size`` is how many examples one pass of a full-data mean
    gradient takes: the gradient is the same mean at any size (float order aside)."""
    from regionfed.runtime.local_training import mean_gradient

    params = get_flat(tiny_task.build_model(0))
    grads = []
    for size in (3, 256):
        training = FAST.model_copy(update={"gradient_batch_size": size})
        client = next(iter(Simulator(tiny_federation, tiny_task, training,
                                     seed=0).clients.values()))
        grads.append(client.gradient(params))
    want = mean_gradient(tiny_task, tiny_task.build_model(0), params,
                         client.prepared_train, 32)
    for grad in grads:
        torch.testing.assert_close(grad, want, rtol=1e-4, atol=1e-6)
    assert float(want.abs().sum()) > 0
    assert gradient_sizes == [3, 256]


def test_full_gradients_run_one_by_one_on_a_cpu_even_when_batching(
        tiny_federation, tiny_task, monkeypatch, gradient_sizes):
    """On a CPU a client's full-data gradient takes ``gradient_batch_size`` examples a pass,
    one client at a time (measured faster than the vmapped batch), and the round log says
    so; the batched gradient is for accelerators."""
    from regionfed.algorithms.registry import build_strategy
    from regionfed.config import RunConfig
    from regionfed.runtime import simulator as simulator_module

    def never(*args, **kwargs):
        raise AssertionError("batched gradients on a CPU")

    monkeypatch.setattr(simulator_module, "mean_gradients_batched", never)
    threads = []
    one_gradient = simulator_module.mean_gradient

    def on_which_thread(*args, **kwargs):
        threads.append(threading.current_thread())
        return one_gradient(*args, **kwargs)

    monkeypatch.setattr(simulator_module, "mean_gradient", on_which_thread)
    training = FAST.model_copy(update={"rounds": 1, "gradient_batch_size": 7,
                                       "client_batching": "on"})
    run = Simulator(tiny_federation, tiny_task, training, seed=0).run(
        build_strategy("regionfed-meta", RunConfig(methods=["regionfed-meta"])))
    assert gradient_sizes and set(gradient_sizes) == {7}
    said = run.history[0]["client_batching"]
    assert said.startswith("partly batched") and GRADIENTS_ONE_BY_ONE in said
    # a gradient exchange has nothing to batch on a CPU: its steps run on this thread, not
    # one fresh lockstep thread each (torch's small products are ~3× slower on those)
    assert threads and set(threads) == {threading.main_thread()}
