"""Batched (vmap) client training equals the sequential per-client loop."""

import dataclasses

import pytest
import torch
from helpers import assert_trained_alike

from regionfed.errors import NumericalError
from regionfed.models.query_task import IGNORE
from regionfed.runtime.batched_training import (
    ClientOptions,
    batched_optimizer_step,
    init_batched_optimizer,
    mean_gradients_batched,
    stack_batches,
    train_local_batched,
)
from regionfed.runtime.local_training import OptimizerConfig, mean_gradient, train_local
from regionfed.runtime.params import get_flat, parameter_slices

BATCH = 16
SIZES = (72, 50, 33, 17, 72, 5, 0)  # unequal clients (1–5 steps an epoch) and an empty one


def _subset(prepared, n):
    return dataclasses.replace(prepared, **{f.name: getattr(prepared, f.name)[:n]
                                            for f in dataclasses.fields(prepared)})


@pytest.fixture(scope="module")
def clients(tiny_federation, tiny_task):
    """Prepared training data of the 6 clients cut to unequal sizes (+ an empty client);
    client 2 carries non-uniform example weights."""
    out = []
    for i, n in enumerate(SIZES):
        client = tiny_federation.clients[i % len(tiny_federation.clients)]
        prepared = _subset(tiny_task.prepare(client.train, training=True), n)
        if i == 2:
            weight = torch.rand(n, generator=torch.Generator().manual_seed(5)) + 0.5
            prepared = tiny_task.weighted(prepared, weight)
        out.append(prepared)
    return out


@pytest.fixture(scope="module")
def starts(tiny_task):
    return [get_flat(tiny_task.build_model(seed)) for seed in range(len(SIZES))]


def _gens(seed=0):
    return [torch.Generator().manual_seed(seed + i) for i in range(len(SIZES))]


@torch.no_grad()
def test_padding_a_batch_leaves_the_loss_unchanged(tiny_task, clients):
    model = tiny_task.build_model(0)
    # the batch of 8 with the shortest queries, so that the stack pads its columns too
    small = min((next(tiny_task.batches(clients[3], 8, torch.Generator().manual_seed(s)))
                 for s in range(20)), key=lambda batch: batch["mask"].shape[1])
    big = next(tiny_task.batches(clients[0], 64, torch.Generator().manual_seed(1)))
    stacked, active = stack_batches([small, big, None], tiny_task.batch_fill_values)
    assert active.tolist() == [True, True, False]
    padded = {key: value[0] for key, value in stacked.items()}
    for key in ("intent", "mask", "form_features"):  # really padded: rows, columns, forms
        assert padded[key].shape[0] > small[key].shape[0]
    assert padded["mask"].shape[1] > small["mask"].shape[1]
    assert (padded["ner"][small["ner"].shape[0]:] == IGNORE).all()
    torch.testing.assert_close(tiny_task.loss(model, padded), tiny_task.loss(model, small),
                               rtol=1e-6, atol=1e-6)
    # the all-padding batch of an inactive client has weight 0 and a finite (zero) loss
    empty = {key: value[2] for key, value in stacked.items()}
    assert float(empty["weight"].sum()) == 0.0
    assert float(tiny_task.loss(model, empty)) == 0.0
    # negative control: padding the targets with 0 instead of IGNORE counts fake tokens
    zero_filled, _ = stack_batches([small, big], {})
    wrong = {key: value[0] for key, value in zero_filled.items()}
    assert abs(float(tiny_task.loss(model, wrong) - tiny_task.loss(model, small))) > 1e-3


OPTIMIZERS = {
    "sgd": OptimizerConfig(name="sgd", lr=0.05, momentum=0.9, weight_decay=0.01),
    "adamw": OptimizerConfig(name="adamw", lr=3e-3, weight_decay=0.05),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("epochs", [1, 2, (2, 1, 2, 1, 1, 2, 1)])
def test_batched_training_equals_the_sequential_loop(tiny_task, clients, starts, name, epochs):
    config = OPTIMIZERS[name]
    model = tiny_task.build_model(0)
    per_client = [epochs] * len(SIZES) if isinstance(epochs, int) else list(epochs)
    sequential = [train_local(tiny_task, model, start, prepared, epochs=e, batch_size=BATCH,
                              optimizer=config, generator=gen)
                  for start, prepared, e, gen in zip(starts, clients, per_client, _gens(),
                                                     strict=True)]
    batched = train_local_batched(tiny_task, model, torch.stack(starts), clients,
                                  epochs=epochs if isinstance(epochs, int) else per_client,
                                  batch_size=BATCH, optimizer=config, generators=_gens(),
                                  max_clients=3)
    assert len(batched) == len(SIZES)
    # the key biases get a zero gradient in exact arithmetic (softmax is shift-invariant)
    noise_only = [s for n, s in parameter_slices(model).items() if "k_proj.bias" in n]
    steps = max(per_client) * -(-max(SIZES) // BATCH)
    for k, ((want, want_loss), (got, got_loss)) in enumerate(zip(sequential, batched,
                                                                 strict=True)):
        assert not torch.equal(got, starts[k]) or SIZES[k] == 0
        assert got_loss == pytest.approx(want_loss, rel=1e-5, abs=1e-6)
        assert_trained_alike(got, want, optimizer=config, steps=steps, noise_only=noise_only)
    assert torch.equal(batched[-1][0], starts[-1]) and batched[-1][1] == 0.0  # no data


@pytest.mark.parametrize("shared", [False, True], ids=["own-generators", "one-generator"])
def test_batched_training_draws_the_same_batches_as_the_sequential_loop(tiny_task, clients,
                                                                         starts, shared):
    if shared:  # one generator for all clients: it must be drawn from in client order
        one_seq, one_bat = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
        gens_seq, gens_bat = [one_seq] * len(SIZES), [one_bat] * len(SIZES)
    else:
        gens_seq, gens_bat = _gens(7), _gens(7)
    model = tiny_task.build_model(0)
    config = OPTIMIZERS["sgd"]
    want = [train_local(tiny_task, model, start, prepared, epochs=2, batch_size=BATCH,
                        optimizer=config, generator=gen)
            for start, prepared, gen in zip(starts, clients, gens_seq, strict=True)]
    got = train_local_batched(tiny_task, model, starts, clients, epochs=2, batch_size=BATCH,
                              optimizer=config, generators=gens_bat, max_clients=4)
    for a, b in zip(gens_seq, gens_bat, strict=True):  # same generator consumption
        assert torch.equal(a.get_state(), b.get_state())
    for (w, _), (g, _) in zip(want, got, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_finished_clients_are_not_computed(tiny_task, clients, starts, monkeypatch):
    """Clients sorted by step count finish shortest first: from then on only the clients
    still training are stacked, so the rows computed are the clients' steps, no padding."""
    import regionfed.runtime.batched_training as batched

    stacked_rows = []
    real = batched.stack_batches

    def counting(batches, fill):
        stacked_rows.append(len(batches))
        return real(batches, fill)

    monkeypatch.setattr(batched, "stack_batches", counting)
    train_local_batched(tiny_task, tiny_task.build_model(0), starts, clients, epochs=1,
                        batch_size=BATCH, optimizer=OPTIMIZERS["sgd"], generators=_gens(),
                        max_clients=len(SIZES))
    assert sum(stacked_rows) == sum(-(-n // BATCH) for n in SIZES)  # 5+4+3+2+5+1+0 steps


def _reference_optimizer(config, param):
    if config.name == "sgd":
        return torch.optim.SGD([param], lr=config.lr, momentum=config.momentum,
                               weight_decay=config.weight_decay)
    return torch.optim.AdamW([param], lr=config.lr, weight_decay=config.weight_decay)


@pytest.mark.parametrize("config", [
    OptimizerConfig(name="sgd", lr=0.1, momentum=0.0, weight_decay=0.0),
    OptimizerConfig(name="sgd", lr=0.1, momentum=0.9, weight_decay=0.01),
    OptimizerConfig(name="adamw", lr=0.01, weight_decay=0.0),
    OptimizerConfig(name="adamw", lr=0.01, weight_decay=0.1),
], ids=["sgd", "sgd-momentum-wd", "adamw", "adamw-wd"])
def test_functional_optimizer_matches_torch_optim_step_for_step(config):
    gen = torch.Generator().manual_seed(0)
    shapes = {"w": (4, 5), "b": (7,)}
    params = {n: torch.randn(3, *s, generator=gen) for n, s in shapes.items()}
    refs = [{n: torch.nn.Parameter(params[n][k].clone()) for n in shapes} for k in range(3)]
    ref_opts = [{n: _reference_optimizer(config, p) for n, p in ref.items()} for ref in refs]
    state = init_batched_optimizer(config, params)
    schedule = [(1, 1, 1), (1, 0, 1), (1, 0, 1), (0, 1, 1), (1, 1, 1), (0, 1, 0)]
    for flags in schedule:  # client 1 falls two steps behind: per-client step counts
        active = torch.tensor(flags, dtype=torch.bool)
        grads = {n: torch.randn(3, *s, generator=gen) for n, s in shapes.items()}
        before = {n: p.clone() for n, p in params.items()}
        state_before = {key: {n: t.clone() for n, t in b.items()}
                        for key, b in state.buffers.items()}
        batched_optimizer_step(config, params, {n: g.clone() for n, g in grads.items()},
                               state, active)
        for k in range(3):
            if not flags[k]:  # inactive: parameters and state bit-identical
                for n in shapes:
                    assert torch.equal(params[n][k], before[n][k])
                    for key, b in state.buffers.items():
                        assert torch.equal(b[n][k], state_before[key][n][k])
                continue
            for n in shapes:
                refs[k][n].grad = grads[n][k].clone()
                ref_opts[k][n].step()
                torch.testing.assert_close(params[n][k], refs[k][n].detach(),
                                           rtol=1e-6, atol=1e-7)
    assert state.step.tolist() == [sum(f[k] for f in schedule) for k in range(3)]


def test_mean_gradients_batched_equals_mean_gradient(tiny_task, clients, starts):
    model = tiny_task.build_model(0)
    want = [mean_gradient(tiny_task, model, s, p, BATCH)
            for s, p in zip(starts, clients, strict=True)]
    got = mean_gradients_batched(tiny_task, model, starts, clients, BATCH, max_clients=4)
    assert float(want[0].abs().max()) > 1e-2
    assert float(got[-1].abs().max()) == 0.0  # the empty client
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_a_non_finite_loss_raises(tiny_task, clients, starts):
    bad = torch.stack(starts[:3])
    bad[1] = float("nan")
    with pytest.raises(NumericalError, match="non-finite loss"):
        train_local_batched(tiny_task, tiny_task.build_model(0), bad, clients[:3], epochs=1,
                            batch_size=BATCH, optimizer=OPTIMIZERS["sgd"],
                            generators=_gens()[:3])


def test_unstackable_batches_raise_type_error(tiny_task, clients, starts, monkeypatch):
    monkeypatch.setattr(tiny_task, "batch_fill_values", None)
    model = tiny_task.build_model(0)
    with pytest.raises(TypeError, match="can't be stacked"):
        train_local_batched(tiny_task, model, starts[:2], clients[:2], epochs=1,
                            batch_size=BATCH, optimizer=OPTIMIZERS["sgd"],
                            generators=_gens()[:2])
    with pytest.raises(TypeError, match="can't be stacked"):
        mean_gradients_batched(tiny_task, model, starts[:2], clients[:2], BATCH)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_proximal_term_trains_as_the_sequential_extra_loss(tiny_task, clients, starts, name):
    """(μ/2)‖θ − a‖² per client (Ditto's personal step, FedProx): batched = train_local with
    the Proximal extra loss, rows without a term train plainly; a strong μ keeps θ near a."""
    from regionfed.algorithms.base import Proximal

    config = OPTIMIZERS[name]
    model = tiny_task.build_model(0)
    anchors = [get_flat(tiny_task.build_model(100 + k)) for k in range(len(SIZES))]
    mus = [0.5, None, 5.0, 0.1, 50.0, 1.0, 2.0]
    terms = [None if mu is None else Proximal(a, mu) for a, mu in zip(anchors, mus,
                                                                      strict=True)]
    sequential = [train_local(tiny_task, model, start, prepared, epochs=2, batch_size=BATCH,
                              optimizer=config, generator=gen, extra_loss=term)
                  for start, prepared, gen, term in zip(starts, clients, _gens(), terms,
                                                        strict=True)]
    batched = train_local_batched(
        tiny_task, model, starts, clients, epochs=2, batch_size=BATCH, optimizer=config,
        generators=_gens(), max_clients=3,
        options=[None if t is None else ClientOptions(proximal=(t.anchor, t.mu))
                 for t in terms])
    plain = train_local_batched(tiny_task, model, starts, clients, epochs=2, batch_size=BATCH,
                                optimizer=config, generators=_gens(), max_clients=3)
    noise_only = [s for n, s in parameter_slices(model).items() if "k_proj.bias" in n]
    steps = 2 * -(-max(SIZES) // BATCH)
    for k, ((want, want_loss), (got, got_loss)) in enumerate(zip(sequential, batched,
                                                                 strict=True)):
        assert got_loss == pytest.approx(want_loss, rel=1e-5, abs=1e-6)  # the term included
        assert_trained_alike(got, want, optimizer=config, steps=steps, noise_only=noise_only)
        if mus[k] is None or SIZES[k] == 0:
            torch.testing.assert_close(got, plain[k][0])
        else:  # the term pulled θ towards its anchor
            assert (got - anchors[k]).norm() < (plain[k][0] - anchors[k]).norm()
    with pytest.raises(ValueError, match="client options"):
        train_local_batched(tiny_task, model, starts, clients, epochs=1, batch_size=BATCH,
                            optimizer=config, generators=_gens(), options=[None, None])


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_masks_mixtures_and_step_caps_train_as_the_sequential_loop(tiny_task, clients, starts,
                                                                     name):
    """FedBABU/FedRep's frozen masks, APFL's mixture s·θ + b (with a proximal term on one
    client), pFedMe's step cap: each client of one batch with its own options equals
    train_local with the same options; frozen entries come back bit for bit."""
    from regionfed.algorithms.base import Proximal

    config = OPTIMIZERS[name]
    model = tiny_task.build_model(0)
    total = starts[0].numel()
    head = torch.zeros(total, dtype=torch.bool)
    head[-total // 5:] = True
    other = get_flat(tiny_task.build_model(50))
    anchor = get_flat(tiny_task.build_model(60))
    options = [dict(trainable=head), dict(trainable=~head),
               dict(mixing=(0.3, 0.7 * other)), dict(max_steps=2),
               dict(mixing=(0.6, 0.4 * other), extra_loss=Proximal(anchor, 2.0)),
               dict(max_steps=1, trainable=~head), {}]
    sequential = [train_local(tiny_task, model, start, prepared, epochs=2, batch_size=BATCH,
                              optimizer=config, generator=gen, **o)
                  for start, prepared, gen, o in zip(starts, clients, _gens(), options,
                                                     strict=True)]
    batched = train_local_batched(
        tiny_task, model, starts, clients, epochs=2, batch_size=BATCH, optimizer=config,
        generators=_gens(), max_clients=4,
        options=[ClientOptions(proximal=(o["extra_loss"].anchor, o["extra_loss"].mu)
                               if "extra_loss" in o else None,
                               trainable=o.get("trainable"), mixing=o.get("mixing"),
                               max_steps=o.get("max_steps")) for o in options])
    noise_only = [s for n, s in parameter_slices(model).items() if "k_proj.bias" in n]
    for k, ((want, want_loss), (got, got_loss)) in enumerate(zip(sequential, batched,
                                                                 strict=True)):
        assert got_loss == pytest.approx(want_loss, rel=1e-5, abs=1e-6)
        assert_trained_alike(got, want, optimizer=config, steps=2 * -(-max(SIZES) // BATCH),
                             noise_only=noise_only)
        if "trainable" in options[k]:
            frozen = ~options[k]["trainable"]
            assert torch.equal(got[frozen], starts[k][frozen])
            assert not torch.equal(got[~frozen], starts[k][~frozen])
    # the cap: 2 steps from the same batches as the sequential loop, fewer than uncapped
    uncapped = train_local(tiny_task, model, starts[3], clients[3], epochs=2, batch_size=BATCH,
                           optimizer=config, generator=_gens()[3])
    assert not torch.allclose(uncapped[0], batched[3][0])


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_functional_adamw_all_clients_in_step_matches_torch_optim(weight_decay):
    """Every client active at the same step: the stacked update runs torch's fused AdamW
    kernel; it must still be each client's own torch.optim.AdamW step, step for step."""
    config = OptimizerConfig(name="adamw", lr=0.01, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(1)
    params = {"w": torch.randn(4, 6, 3, generator=gen), "b": torch.randn(4, 5, generator=gen)}
    refs = [{n: torch.nn.Parameter(t[k].clone()) for n, t in params.items()} for k in range(4)]
    opts = [torch.optim.AdamW(list(ref.values()), lr=0.01, weight_decay=weight_decay)
            for ref in refs]
    state = init_batched_optimizer(config, params)
    for _ in range(6):
        grads = {n: torch.randn(t.shape, generator=gen) for n, t in params.items()}
        grads["w"][:, :2] = 0.0  # rows a client never touches (v stays 0 there)
        seen = {n: g.clone() for n, g in grads.items()}
        batched_optimizer_step(config, params, grads, state)
        assert all(torch.equal(grads[n], seen[n]) for n in grads)  # grads only read
        for k, (ref, opt) in enumerate(zip(refs, opts, strict=True)):
            for n, p in ref.items():
                p.grad = seen[n][k].clone()
            opt.step()
            for n, p in ref.items():
                torch.testing.assert_close(params[n][k], p.detach(), rtol=1e-6, atol=1e-7)
    assert state.step.tolist() == [6] * 4
