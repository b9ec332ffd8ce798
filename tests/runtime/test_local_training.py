import pytest
import torch

from regionfed.errors import NumericalError
from regionfed.runtime.local_training import (
    FusedAdamW,
    OptimizerConfig,
    deterministic,
    steps_per_epoch,
    train_local,
)
from regionfed.runtime.params import declared_blocks, get_flat, parameter_blocks

SGD = OptimizerConfig(name="sgd", lr=0.1)


@pytest.fixture(scope="module")
def setup(tiny_federation, tiny_task):
    model = tiny_task.build_model(0)
    prepared = tiny_task.prepare(tiny_federation.clients[0].train, training=True)
    return model, get_flat(model), prepared


def _train(task, setup, optimizer=SGD, **options):
    model, start, prepared = setup
    return train_local(task, model, start, prepared, epochs=1, batch_size=16,
                       optimizer=optimizer, generator=torch.Generator().manual_seed(0),
                       **options)[0]


@pytest.mark.parametrize("optimizer", [SGD, OptimizerConfig(name="adamw", lr=0.01,
                                                            weight_decay=0.1)])
def test_frozen_entries_come_back_bit_identical(tiny_task, setup, optimizer):
    _, start, _ = setup
    trainable = torch.zeros_like(start, dtype=torch.bool)
    trainable[: start.numel() // 2] = True  # splits some tensors in the middle
    trained = _train(tiny_task, setup, optimizer, trainable=trainable)
    assert torch.equal(trained[~trainable], start[~trainable])
    assert not torch.equal(trained[trainable], start[trainable])


def test_identity_mixing_equals_plain_training(tiny_task, setup):
    _, start, _ = setup
    plain = _train(tiny_task, setup)
    mixed = _train(tiny_task, setup, mixing=(1.0, torch.zeros_like(start)))
    assert torch.allclose(plain, mixed, atol=1e-6)


def test_mixing_trains_theta_through_the_mixture(tiny_task, setup):
    """One SGD step with the model at a·θ + b: θ moves by −η·a·∇L(a·θ + b)."""
    model, start, prepared = setup
    offset = torch.randn_like(start) * 0.01
    a = 0.25
    theta = _train(tiny_task, setup, mixing=(a, offset), max_steps=1)
    # the same step, computed by hand: the gradient at the mixture from the plain trainer
    mixture = a * start + offset
    plain = train_local(tiny_task, model, mixture, prepared, epochs=1, batch_size=16,
                        optimizer=SGD, generator=torch.Generator().manual_seed(0),
                        max_steps=1)[0]
    gradient = (mixture - plain) / SGD.lr
    assert torch.allclose(theta, start - SGD.lr * a * gradient, atol=1e-6)


def test_max_steps_caps_the_optimizer_steps(tiny_task, setup):
    _, start, prepared = setup
    assert steps_per_epoch(tiny_task, prepared, 16) > 2
    one = _train(tiny_task, setup, max_steps=1)
    two = _train(tiny_task, setup, max_steps=2)
    full = _train(tiny_task, setup)
    assert not torch.equal(one, two) and not torch.equal(two, full)
    assert torch.equal(_train(tiny_task, setup, max_steps=1), one)


def test_declared_groups_are_located_in_the_flat_vector(tiny_task):
    model = tiny_task.build_model(1)
    start = get_flat(model)
    groups = declared_blocks(tiny_task, model)
    blocks = parameter_blocks(model)
    assert {b.name for b in groups["head"]} >= {"intent_head.weight", "ner_head.bias"}
    assert all(".attn." in b.name for b in groups["attention"])
    weight = blocks["intent_head.weight"]
    assert torch.equal(start[weight.span].view(weight.shape),
                       model.intent_head.weight.detach())


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_optimizer_uses_fused_kernels_with_the_same_updates(name):
    """make_optimizer picks torch's fused kernels on CPU floats; they follow the same rule
    as the foreach loop (last-bit differences only)."""
    from regionfed.runtime.local_training import make_optimizer

    config = OptimizerConfig(name=name, lr=0.01, momentum=0.9 if name == "sgd" else 0.0,
                             weight_decay=0.1)
    torch.manual_seed(0)
    fused = [torch.randn(7, 5, requires_grad=True), torch.randn(3, requires_grad=True)]
    plain = [t.detach().clone().requires_grad_(True) for t in fused]
    opt = make_optimizer(fused, config)
    if name == "sgd":
        assert opt.defaults["fused"] is True
    else:
        assert isinstance(opt, FusedAdamW)
    reference = (torch.optim.SGD(plain, lr=0.01, momentum=0.9, weight_decay=0.1,
                                 foreach=True) if name == "sgd"
                 else torch.optim.AdamW(plain, lr=0.01, weight_decay=0.1, foreach=True))
    for step in range(30):
        for a, b in zip(fused, plain, strict=True):
            g = torch.sin(torch.arange(a.numel(), dtype=torch.float32) + step).view_as(a)
            a.grad, b.grad = g, g.clone()
        opt.step()
        reference.step()
    for a, b in zip(fused, plain, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        assert not torch.equal(a, torch.zeros_like(a))


def test_fused_adamw_is_torch_optim_adamw_bit_for_bit():
    """FusedAdamW is torch.optim.AdamW(fused=True) without its per-step bookkeeping: the same
    values to the last bit, also when a tensor has no gradient for some steps (skipped, its
    state and step count untouched, as torch.optim does)."""
    torch.manual_seed(0)
    ours = [torch.randn(7, 5, requires_grad=True), torch.randn(3, requires_grad=True)]
    theirs = [t.detach().clone().requires_grad_(True) for t in ours]
    opt = FusedAdamW(ours, lr=0.01, weight_decay=0.1)
    reference = torch.optim.AdamW(theirs, lr=0.01, weight_decay=0.1, fused=True)
    for step in range(20):
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            if i == 1 and step % 3 == 0:  # the bias has no gradient every third step
                a.grad = b.grad = None
                continue
            g = torch.cos(torch.arange(a.numel(), dtype=torch.float32) * (step + 1)).view_as(a)
            a.grad, b.grad = g, g.clone()
        opt.step()
        reference.step()
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)
    assert opt.counts[1] == float(reference.state[theirs[1]]["step"]) == 13
    for a in ours:
        a.grad = None
    before = [a.detach().clone() for a in ours]
    opt.step()  # nothing has a gradient: nothing moves
    assert all(torch.equal(a, b) for a, b in zip(ours, before, strict=True))


def test_a_non_finite_loss_raises(tiny_task, setup):
    _, start, _ = setup
    with pytest.raises(NumericalError, match="non-finite loss"):
        _train(tiny_task, setup, extra_loss=lambda model: torch.tensor(float("inf")))
    with pytest.raises(NumericalError, match="non-finite loss"):
        train_local(tiny_task, setup[0], torch.full_like(start, float("nan")), setup[2],
                    epochs=1, batch_size=16, optimizer=SGD,
                    generator=torch.Generator().manual_seed(0))


def test_deterministic_mode_keeps_new_tensors_unfilled():
    """Deterministic kernels without torch's NaN fill of every new tensor (a debugging aid
    costing a fill per allocation); the training itself stays deterministic (tests above)."""
    deterministic(torch.device("cpu"))
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.utils.deterministic.fill_uninitialized_memory is False
