import pytest
import torch
from helpers import QuadraticClient, run_rounds

from regionfed.algorithms.base import FederationView
from regionfed.algorithms.fedavg import FedAvg
from regionfed.algorithms.scaffold import Scaffold
from regionfed.config import TrainingConfig
from regionfed.errors import ConfigError
from regionfed.privacy.mechanism import DPConfig, clip_update
from regionfed.runtime.local_training import OptimizerConfig
from regionfed.runtime.params import get_flat
from regionfed.runtime.simulator import Simulator

LR = 0.1
#: (target, training examples, local steps): the clients with the most data are far apart
#: and take very different numbers of local steps, the heterogeneity SCAFFOLD corrects
DRIFT = {"a/0": ([4.0, 0.0], 10, 1), "a/1": ([0.0, 4.0], 40, 20),
         "b/0": ([-4.0, 0.0], 20, 5), "b/1": ([0.0, -4.0], 30, 10)}


def drift_problem():
    clients = {c: QuadraticClient(c, c[0], n, torch.tensor(t), lr=LR, steps=k)
               for c, (t, n, k) in DRIFT.items()}
    view = FederationView(("a", "b"), {c: c[0] for c in clients},
                          {c: n for c, (_, n, _) in DRIFT.items()})
    return clients, view


def weighted(values, view):
    n = sum(view.num_examples.values())
    return sum(view.num_examples[c] * v for c, v in values.items()) / n


def test_scaffold_removes_the_client_drift_of_fedavg():
    # global objective Σ_i (n_i/n)·½‖θ − t_i‖²: optimum θ* = Σ_i (n_i/n) t_i
    clients, view = drift_problem()
    optimum = weighted({c: cl.target for c, cl in clients.items()}, view)
    # FedAvg's fixed point: client i returns Δ_i = a_i (x − t_i), a_i = 1 − (1 − η)^{K_i}, so
    # FedAvg settles at Σ n_i a_i t_i / Σ n_i a_i, biased toward the clients with more steps
    a = {c: 1 - (1 - LR) ** cl.steps for c, cl in clients.items()}
    biased = (weighted({c: a[c] * cl.target for c, cl in clients.items()}, view)
              / weighted(a, view))
    errors = {}
    for strategy in (FedAvg(), Scaffold()):
        clients, view = drift_problem()
        run_rounds(strategy, clients, view, rounds=20)
        errors[strategy.name] = float((strategy.params - optimum).norm())
        if strategy.name == "fedavg":
            assert torch.allclose(strategy.params, biased, atol=1e-4)
    assert errors["fedavg"] > 0.5  # a genuine, non-vanishing drift (≈ 0.579)
    assert errors["scaffold"] < 1e-4  # SCAFFOLD converges to θ*
    assert errors["scaffold"] < 0.1 * errors["fedavg"]


def test_control_variates_follow_option_two():
    clients, view = drift_problem()
    strategy = Scaffold()
    run_rounds(strategy, clients, view, rounds=1)
    # round 1 (c = c_i = 0): no correction, c_i = (x − y)/(K η) with x = 0
    c0 = {}
    for cid, cl in clients.items():
        y = cl.target * (1 - (1 - LR) ** cl.steps)
        c0[cid] = (0 - y) / (cl.steps * LR)
        assert torch.allclose(cl.state["control"], c0[cid], atol=1e-5)
    # DP off, full participation: c = Σ (n_i/n) Δc_i (the data-size weights of FedAvg's mean)
    assert torch.allclose(strategy.control, weighted(c0, view), atol=1e-5)
    # round 2, one client by hand: K steps y ← y − η(y − t + c − c_i) from x, i.e. gradient
    # steps toward t' = t − (c − c_i), then c_i⁺ = c_i − c + (x − y)/(K η)
    x, c = strategy.params.clone(), strategy.control.clone()
    instruction = strategy.configure_train(2)[1]
    cl = clients[instruction.client_id]
    own = cl.state["control"].clone()
    result = strategy.handle(instruction, cl)
    shifted = cl.target - (c - own)
    y = shifted + (1 - LR) ** cl.steps * (x - shifted)
    expected = own - c + (x - y) / (cl.steps * LR)
    assert torch.allclose(result.update, x - y, atol=1e-5)
    assert torch.allclose(cl.state["control"], expected, atol=1e-5)
    assert torch.allclose(result.metrics["control_delta"], expected - own, atol=1e-6)
    assert result.metrics["local_steps"] == cl.steps


def test_user_level_dp_clips_and_noises_the_control_update_too():
    # σ = 0: clipping only; c = (1/N) Σ_i clip(Δc_i, C), the paper's uniform update
    clients, view = drift_problem()
    clipped = Scaffold(dp=DPConfig(mode="user", sigma=0.0, clip=0.1))
    run_rounds(clipped, clients, view, rounds=1)
    deltas = [clip_update(cl.state["control"], 0.1) for cl in clients.values()]
    assert torch.allclose(clipped.control, sum(deltas) / len(deltas), atol=1e-6)
    # σ = 1: the released c carries Gaussian noise of std σC/(qN) per coordinate
    clients, view = drift_problem()
    noisy = Scaffold(dp=DPConfig(mode="user", sigma=1.0, clip=0.1))
    run_rounds(noisy, clients, view, rounds=1)
    assert torch.isfinite(noisy.control).all()
    assert not torch.allclose(noisy.control, clipped.control, atol=1e-4)
    # Δy and Δc from one Poisson sample: ONE joint release at σ/√2, not two at σ
    [event] = noisy.releases.drain()
    assert event.vectors == 2 and event.noise_multiplier == pytest.approx(1 / 2 ** 0.5)
    assert event.regions == tuple(sorted(view.regions))


class RecordingScaffold(Scaffold):
    """Scaffold that keeps, per round, each client's reply and c_i, and the server's c."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.replies, self.controls = [], []

    def configure_train(self, rnd):
        self.replies.append({})
        return super().configure_train(rnd)

    def client_train(self, instruction, client):
        result = super().client_train(instruction, client)
        self.replies[-1][client.client_id] = (result, client.state["control"].clone(),
                                              client.steps_per_epoch())
        return result

    def aggregate_train(self, rnd, results):
        log = super().aggregate_train(rnd, results)
        self.controls.append(self.control.clone())
        return log


def test_simulated_run_with_sgd(tiny_federation, tiny_task):
    training = TrainingConfig(rounds=2, local_epochs=2, batch_size=32, eval_every=2,
                              optimizer=OptimizerConfig(name="sgd", lr=0.1),
                              client_batching="on")
    sim = Simulator(tiny_federation, tiny_task, training, seed=0)
    init = get_flat(sim.model).clone()

    def mean_val_loss(params):
        sums = [c.validation_loss(params) for c in sim.clients.values()]
        return sum(s for s, _ in sums) / sum(n for _, n in sums)

    strategy = RecordingScaffold()
    run = sim.run(strategy)
    assert torch.isfinite(run.final_params).all() and torch.isfinite(strategy.control).all()
    assert run.history[0]["client_batching"] == \
        "sequential (scaffold's client step trains with a custom extra loss)"
    assert mean_val_loss(run.final_params) < mean_val_loss(init)
    # round 1 (c = c_i = 0): c_i = Δ_i/(K η_l), with K (counted by the correction term) equal
    # to local_epochs × steps_per_epoch of real mini-batch training
    first = strategy.replies[0]
    assert len(first) == len(sim.clients)
    for result, own, per_epoch in first.values():
        steps = training.local_epochs * per_epoch
        assert result.metrics["local_steps"] == steps
        assert torch.allclose(own, result.update / (steps * training.optimizer.lr),
                              atol=1e-6)
    # the server's c after round 1: the data-size-weighted mean of the Δc_i (DP off)
    expected = weighted({cid: own for cid, (_, own, _) in first.items()}, sim.view)
    assert torch.allclose(strategy.controls[0], expected, atol=1e-6)
    assert not torch.equal(strategy.controls[1], strategy.controls[0])


def test_client_sampling_keeps_the_server_control_variate_exact():
    # only the sampled clients change c_i, and c moves by exactly their weighted Δc_i, so
    # c = Σ_i (n_i/n) c_i holds after every round and SCAFFOLD still reaches θ*
    clients, view = drift_problem()
    optimum = weighted({c: cl.target for c, cl in clients.items()}, view)
    strategy = Scaffold(sample_rate=0.5)
    logs = run_rounds(strategy, clients, view, rounds=60, seed=1)
    assert min(log["clients"] for log in logs) < len(clients)  # sampling did happen
    own = {c: cl.state.get("control", torch.zeros(2)) for c, cl in clients.items()}
    assert torch.allclose(strategy.control, weighted(own, view), atol=1e-5)
    assert float((strategy.params - optimum).norm()) < 1e-3


def test_option_one_sets_the_control_variate_to_the_gradient_at_the_server_model():
    def fresh():
        steps = {"a/0": 2, "a/1": 10}  # unequal local work: FedAvg would drift
        clients = {c: QuadraticClient(c, "a", 10, torch.tensor(t), lr=0.1, steps=steps[c])
                   for c, t in {"a/0": [1.0, 0.0], "a/1": [0.0, 2.0]}.items()}
        return clients, FederationView(("a",), {c: "a" for c in clients},
                                       {c: 10 for c in clients})

    clients, view = fresh()
    strategy = Scaffold(option="I")
    run_rounds(strategy, clients, view, rounds=1, init=torch.tensor([0.5, 0.5]))
    for client in clients.values():  # g_i(x) = x − t_i at the round's start x
        assert torch.allclose(client.state["control"], torch.tensor([0.5, 0.5]) - client.target)
    clients, view = fresh()
    strategy = Scaffold(option="I")
    run_rounds(strategy, clients, view, rounds=60)
    assert torch.allclose(strategy.params, torch.tensor([0.5, 1.0]), atol=1e-3)
    with pytest.raises(ConfigError, match="option"):
        Scaffold(option="III")
