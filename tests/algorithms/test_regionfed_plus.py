"""regionfed-plus: noise-aware shrinkage, the split budget and two-level personalization
on problems with known answers."""

import math

import dp_accounting
import numpy as np
import pytest
import torch
from helpers import QuadraticClient, run_rounds, two_region_quadratics

from regionfed.algorithms.base import FederationView, ParameterBlock, TrainInstruction
from regionfed.algorithms.fedprox import proximal_term
from regionfed.algorithms.regionfed.config import RegionFedPlusConfig
from regionfed.algorithms.regionfed.plus import (
    PERSONAL_EPOCHS,
    PERSONAL_LAMBDA,
    RegionFedPlus,
    personal_anchor_weight,
)
from regionfed.algorithms.regionfed.shrinkage import (
    partition_blocks,
    shrinkage_factors,
    signal_share,
)
from regionfed.errors import ConfigError
from regionfed.privacy.ledger import PrivacyLedger
from regionfed.privacy.mechanism import DPConfig


def _offsets(signal_std: float, noise_var: float, regions: int = 8, dim: int = 4000,
             seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {f"r{k}": signal_std * torch.randn(dim, generator=g)
            + math.sqrt(noise_var) * torch.randn(dim, generator=g) for k in range(regions)}


def test_identical_regions_under_large_noise_shrink_to_the_global_model():
    offsets = _offsets(signal_std=0.0, noise_var=4.0)  # the offsets are noise only
    blocks = partition_blocks({}, 4000)
    alpha = shrinkage_factors(offsets, {r: [4.0] for r in offsets}, blocks)
    assert all(a[0] < 0.05 for a in alpha.values())


def test_regions_that_differ_far_beyond_the_noise_keep_their_offsets():
    offsets = _offsets(signal_std=1.0, noise_var=0.01)
    alpha = shrinkage_factors(offsets, {r: [0.01] for r in offsets},
                              partition_blocks({}, 4000))
    # τ² ≈ 1, V = 0.01: α = τ²/(τ² + V) ≈ 0.99
    assert all(a[0] == pytest.approx(1 / 1.01, abs=0.01) for a in alpha.values())
    assert shrinkage_factors(offsets, {r: [0.0] for r in offsets},
                             partition_blocks({}, 4000))["r0"] == [1.0]  # no noise


def test_each_block_is_shrunk_on_its_own():
    """A head whose regions differ and a body that is pure noise: α ≈ 1 on the head, ≈ 0 on
    the body."""
    dim = 4000
    head = torch.zeros(dim, dtype=torch.bool)
    head[:2000] = True
    signal = _offsets(1.0, 0.0, dim=dim)
    noise = _offsets(0.0, 1.0, dim=dim, seed=1)
    offsets = {r: torch.where(head, signal[r], noise[r]) for r in signal}
    blocks = partition_blocks({"head": head}, dim)
    assert [int(b.sum()) for b in blocks] == [2000, 2000]
    assert torch.equal(blocks[0] | blocks[1], torch.ones(dim, dtype=torch.bool))
    alpha = shrinkage_factors(offsets, {r: [0.05, 1.0] for r in offsets}, blocks)
    assert all(a[0] > 0.9 and a[1] < 0.1 for a in alpha.values())


@pytest.mark.parametrize("granularity", ["groups", "tensors"])
def test_a_small_tensor_with_regional_signal_keeps_its_offset_only_in_its_own_block(
        granularity):
    """A declared head: an 8-entry bias whose regions differ by far more than the noise
    (std 10 against noise variance 1) and a 992-entry weight that is noise only. Shrunk per
    tensor, the bias keeps its offset (α ≈ 1) and the weight falls back to the global model
    (α ≈ 0); shrunk as one head block, τ̂² ≈ 8·100/1000 = 0.8 is shared: the weight keeps
    ~44 % of its noise and the bias loses ~56 % of its signal."""
    dim = 1200
    head = (ParameterBlock("head.bias", 0, (8,)), ParameterBlock("head.weight", 8, (31, 32)))
    view = FederationView(("a", "b"), {"a/0": "a", "b/0": "b"}, {"a/0": 1, "b/0": 1},
                          parameter_groups={"head": head})
    strategy = RegionFedPlus(RegionFedPlusConfig(shrinkage_blocks=granularity))
    strategy.setup(torch.zeros(dim), view, np.random.default_rng(0))
    sizes = [int(b.sum()) for b in strategy.blocks]
    assert sizes == ([8, 992, 200] if granularity == "tensors" else [1000, 200])
    bias = torch.zeros(dim, dtype=torch.bool)
    bias[:8] = True
    signal = _offsets(10.0, 0.0, dim=dim)
    noise = _offsets(0.0, 1.0, dim=dim, seed=1)
    offsets = {r: torch.where(bias, signal[r], 0.0) + noise[r] for r in signal}
    alpha = shrinkage_factors(offsets, {r: [1.0] * len(sizes) for r in offsets},
                              strategy.blocks)
    if granularity == "tensors":
        assert all(a[0] > 0.97 and a[1] < 0.05 for a in alpha.values())
    else:
        assert all(0.3 < a[0] < 0.6 for a in alpha.values())


def test_the_diagnostics_count_each_regions_choices_at_the_last_evaluation():
    clients, view = _shifted()
    # the stale personal model (no refresh): the regional model is the choice's default
    strategy = RegionFedPlus(RegionFedPlusConfig(personal_refresh_epochs=0), server_lr=1.0)
    assert strategy.evaluation_diagnostics() == {}  # nothing evaluated yet
    run_rounds(strategy, clients, view, rounds=1)
    picks = {"a/0": [0.2, 0.9, 0.1], "a/1": [0.9, 0.1, 0.1],  # regional, global, personal
             "b/0": [0.1, 0.1, 0.9], "b/1": [0.1, 0.1, 0.9]}
    for client_id, scores in picks.items():
        clients[client_id].score_ = list(scores)
        strategy.eval_params(client_id, client_id[0], clients[client_id])
    assert strategy.evaluation_diagnostics() == {"choices": {
        "a": {"regional": 1, "global": 1, "personal": 0},
        "b": {"regional": 0, "global": 0, "personal": 2}}}


def test_a_refreshed_candidate_is_trained_from_the_served_model_and_not_kept():
    """Quadratic client (target t, 1 step of lr 0.5 an epoch): 3 epochs from θ_r land at
    θ_r + (1 − 0.5³)(t − θ_r); the kept personal model stays a candidate, unchanged."""
    clients, view = _shifted()
    strategy = RegionFedPlus(RegionFedPlusConfig(personal_refresh_epochs=3,
                                                 personal_lambda=0.0,
                                                 choice_default="refreshed"), server_lr=1.0)
    run_rounds(strategy, clients, view, rounds=1)
    client = clients["a/0"]
    kept = torch.tensor([-5.0, -5.0])
    client.state["personal"] = kept
    served = strategy.regional_params("a")
    want = served + (1 - 0.5 ** 3) * (client.target - served)
    assert torch.allclose(strategy.refreshed_candidate(served, client), want)
    # the refreshed model is the choice's default: scores are read refreshed, regional,
    # global, personal; the bar at 0.5 on 10 examples is κ·s₀(1 − s₀)/n = 0.075
    client.score_ = [0.5, 0.55, 0.4, 0.55]  # others ahead by less than the bar
    assert torch.allclose(strategy.eval_params("a/0", "a", client), want)
    client.score_ = [0.5, 0.6, 0.4, 0.55]  # the regional model ahead by more
    assert torch.equal(strategy.eval_params("a/0", "a", client), served)
    # a served model so poor that a few epochs from it stay far below the personal model
    # trained over many rounds (small regions under DP): the kept one
    client.score_ = [0.3, 0.2, 0.2, 0.8]
    assert strategy.eval_params("a/0", "a", client) is kept
    assert strategy.evaluation_diagnostics()["choices"]["a"] == \
        {"refreshed": 0, "regional": 0, "global": 0, "personal": 1}
    assert client.state["personal"] is kept
    # the proximal term of the personal objective holds it nearer θ_r
    anchored = RegionFedPlus(RegionFedPlusConfig(personal_refresh_epochs=3,
                                                 personal_lambda=1.0), server_lr=1.0)
    run_rounds(anchored, clients, view, rounds=1)
    near = anchored.refreshed_candidate(served, client)
    assert float((near - served).norm()) < float((want - served).norm())
    # off: global, regional and the personal model last trained when the client was sampled
    client.state["personal"] = kept  # (the second strategy's round trained a new one)
    off = RegionFedPlus(RegionFedPlusConfig(personal_refresh_epochs=0))
    run_rounds(off, clients, view, rounds=1)
    client.state["personal"] = kept
    client.score_ = [0.5, 0.4, 0.9]
    assert off.eval_params("a/0", "a", client) is kept
    assert RegionFedPlusConfig().personal_refresh_epochs == 8  # on by default


def test_with_an_on_device_default_the_kept_personal_model_needs_no_margin_over_the_refreshed():
    """``choice_default: on-device``: the better of the refreshed and the kept personal model
    on validation is the default (scores are read refreshed, personal, regional, global);
    the server's models still need the margin (one standard error at 0.55 on 10 examples
    ≈ 0.157, margin 0.5)."""
    clients, view = _shifted()
    config = RegionFedPlusConfig(personal_refresh_epochs=3, personal_lambda=0.0,
                                 choice_default="on-device")
    strategy = RegionFedPlus(config, server_lr=1.0)
    run_rounds(strategy, clients, view, rounds=1)
    client = clients["a/0"]
    kept = torch.tensor([-5.0, -5.0])
    client.state["personal"] = kept
    served = strategy.regional_params("a")
    client.score_ = [0.5, 0.55, 0.6, 0.4]  # personal edges refreshed; regional within margin
    assert strategy.eval_params("a/0", "a", client) is kept
    assert strategy.evaluation_diagnostics()["choices"]["a"] == \
        {"refreshed": 0, "personal": 1, "regional": 0, "global": 0}
    client.score_ = [0.5, 0.55, 0.65, 0.4]  # the regional model past the margin
    assert torch.equal(strategy.eval_params("a/0", "a", client), served)
    # ``refreshed`` keeps the refreshed model where the personal one is only slightly ahead
    default = RegionFedPlus(RegionFedPlusConfig(personal_refresh_epochs=3, personal_lambda=0.0,
                                                choice_default="refreshed"), server_lr=1.0)
    run_rounds(default, clients, view, rounds=1)
    client.state["personal"] = kept
    client.score_ = [0.5, 0.4, 0.4, 0.55]  # refreshed, regional, global, personal
    assert default.eval_params("a/0", "a", client) is not kept
    with pytest.raises(ValueError):
        RegionFedPlusConfig(choice_default="personal")


def test_if_served_holds_makes_the_kept_model_a_peer_only_where_it_beats_the_served_one():
    """``choice_default: if-served-holds``: the client first compares the served θ_r with
    its kept personal model (scores read served, personal) under the choice's own bar
    (posterior κ = 3, 10 examples: 3·s₀(1 − s₀)/10 = 0.075 at s₀ = 0.5); then the four
    candidates, read in the order of ``on-device`` (refreshed, personal, regional, global)
    or of ``refreshed`` (refreshed, regional, global, personal)."""
    assert RegionFedPlusConfig().choice_default == "refreshed"
    clients, view = _shifted()
    strategy = RegionFedPlus(RegionFedPlusConfig(personal_refresh_epochs=3,
                                                 personal_lambda=0.0,
                                                 choice_default="if-served-holds"),
                             server_lr=1.0)
    run_rounds(strategy, clients, view, rounds=1)
    client = clients["a/0"]
    kept = torch.tensor([-5.0, -5.0])
    client.state["personal"] = kept
    # θ_r far below the kept model: the two on-device models are peers, the better one wins
    client.score_ = [0.5, 0.7] + [0.6, 0.62, 0.4, 0.4]
    assert strategy.eval_params("a/0", "a", client) is kept
    # θ_r within the bar of the kept model: the refreshed model stays the default
    client.score_ = [0.5, 0.55] + [0.6, 0.4, 0.4, 0.62]
    assert strategy.eval_params("a/0", "a", client) is not kept
    assert strategy.evaluation_diagnostics()["choices"]["a"]["refreshed"] == 1
    served = strategy.regional_params("a")
    for scores, loses in (([0.5, 0.7], True), ([0.5, 0.55], False), ([0.7, 0.5], False)):
        client.score_ = list(scores)
        assert strategy.served_loses(served, kept, client) is loses


def test_a_worst_case_served_check_asks_a_lead_even_where_the_served_model_scores_zero():
    """θ_r right on none of 10 validation queries: the choice's bar 3·s₀(1 − s₀)/10 is 0, so
    a kept model right on one (0.1) or even half of one (0.05) query's worth beats it;
    ``served_check_variance: worst-case`` asks 3·0.25/10 = 0.075 whatever θ_r scores."""
    clients, view = _shifted()
    checks = {}
    for variance in ("score", "worst-case"):
        strategy = RegionFedPlus(RegionFedPlusConfig(
            personal_refresh_epochs=3, choice_default="if-served-holds",
            served_check_variance=variance), server_lr=1.0)
        run_rounds(strategy, clients, view, rounds=1)
        served, client = strategy.regional_params("a"), clients["a/0"]
        checks[variance] = []
        for kept_score in (0.05, 0.1):
            client.score_ = [0.0, kept_score]
            checks[variance].append(strategy.served_loses(served, torch.ones(2), client))
    assert checks == {"score": [True, True], "worst-case": [False, True]}
    assert RegionFedPlusConfig().served_check_variance == "score"
    with pytest.raises(ValueError):
        RegionFedPlusConfig(served_check_variance="max")


def _jackknife(right):
    """The jackknife of an accuracy: the mean of the other answers, for each answer."""
    return (right.sum() - right) / (len(right) - 1)


# the kept personal model, right on two more of 10 queries and worse on none (0.5 → 0.7),
# beats the refreshed one by 1.3 paired errors (≈ 0.138 with ν = 2:
# √((2·0.25 + 9·0.178)/11/10)) but not by 1.3 single-score errors √(0.25/10) ≈ 0.158;
# at 0.6 it leads by 0.1, less than one single error but more than κ·SE² = 3·0.025
MARGIN = {"choice_rule": "margin"}
PAIRED = {**MARGIN, "choice_margin": 1.3, "choice_error": "paired"}
POSTERIOR = {"choice_margin": 1.0}  # the default rule: the margin is not read


@pytest.mark.parametrize("settings, personal_score, personal_chosen, replicates_read", [
    ({**MARGIN, "choice_margin": 1.3}, 0.7, False, False),
    (PAIRED, 0.7, True, True),
    ({**MARGIN, "choice_margin": 1.0}, 0.6, False, False),
    (POSTERIOR, 0.6, True, False),
])
def test_the_choices_bar_follows_the_error_and_the_rule(settings, personal_score,
                                                       personal_chosen, replicates_read):
    clients, view = _shifted()
    kept = torch.tensor([-5.0, -5.0])
    config = RegionFedPlusConfig(personal_refresh_epochs=3, personal_lambda=0.0,
                                 choice_default="refreshed", **settings)
    strategy = RegionFedPlus(config, server_lr=1.0)
    run_rounds(strategy, clients, view, rounds=1)
    client = clients["a/0"]
    client.state["personal"] = kept
    client.score_ = [0.5, 0.4, 0.4, personal_score]  # refreshed, regional, global, personal
    client.replicates_ = [_jackknife(np.array([1.0] * 5 + [0.0] * 5)),
                          _jackknife(np.array([1.0] * 7 + [0.0] * 3))]
    assert (strategy.eval_params("a/0", "a", client) is kept) == personal_chosen
    assert (not client.replicates_) == replicates_read


@pytest.mark.parametrize("bad", [{"choice_error": "bootstrap"}, {"choice_prior_queries": -1},
                                 {"choice_rule": "bayes"}, {"choice_prior_strength": -1}])
def test_bad_choice_settings_are_refused(bad):
    with pytest.raises(ValueError):
        RegionFedPlusConfig(**bad)


def test_a_personal_model_is_anchored_only_on_a_regional_model_that_validates_as_well():
    client = QuadraticClient("u", "a", 10, torch.zeros(2))
    personal, anchor = torch.zeros(2), torch.ones(2)
    client.score_ = [0.9, 0.4]  # personal, anchor: the regional model is worse
    assert personal_anchor_weight(0.1, personal, anchor, client) == 0.0
    client.score_ = [0.4, 0.9]
    assert personal_anchor_weight(0.1, personal, anchor, client) == 0.1


def _shifted():
    """Region a's clients want x = (2, 0), region b's (−2, 0): a mean of (0, 0)."""
    targets = {"a/0": [2.0, 0.0], "a/1": [2.0, 0.1], "b/0": [-2.0, 0.0], "b/1": [-2.0, -0.1]}
    clients = {c: QuadraticClient(c, c[0], 10, torch.tensor(t)) for c, t in targets.items()}
    view = FederationView(("a", "b"), {c: c[0] for c in clients}, dict.fromkeys(clients, 10))
    return clients, view


def test_without_dp_regional_models_move_towards_their_regions():
    clients, view = _shifted()
    strategy = RegionFedPlus(RegionFedPlusConfig(two_level=False), server_lr=1.0)
    logs = run_rounds(strategy, clients, view, rounds=6)
    global_loss = sum(float((strategy.params - c.target).pow(2).sum()) for c in clients.values())
    regional_loss = sum(float((strategy.regional_params(c.region) - c.target).pow(2).sum())
                        for c in clients.values())
    assert regional_loss < 0.2 * global_loss
    assert all(0.5 < a <= 1.0 for a in logs[-1]["alpha"].values())


def _validating(val_targets: dict[str, list[float]]):
    """:func:`_shifted`'s clients, each validating on its own optimum (default: where its
    training data points)."""
    clients, view = _shifted()
    for c, target in val_targets.items():
        clients[c].val_target = torch.tensor(target)
    return clients, view


def test_an_offset_that_does_not_generalise_is_scaled_back_to_the_global_model():
    """Region b's training data pull it to (−2, 0) but its validation data sit at the
    global optimum (0, 0): its validated scale goes to 0 and b is served θ. Region a
    validates where it trains and keeps its offset (ρ_a ≈ 1: the shrunk offset stops short
    of (2, 0))."""
    clients, view = _validating({"b/0": [0.0, 0.0], "b/1": [0.0, 0.0]})
    strategy = RegionFedPlus(RegionFedPlusConfig(two_level=False), server_lr=1.0)
    logs = run_rounds(strategy, clients, view, rounds=6)
    assert logs[-1]["scale"]["b"] == 0.0
    assert torch.equal(strategy.regional_params("b"), strategy.params)
    assert logs[-1]["scale"]["a"] > 0.99  # 1 to the search's tolerance
    assert float((strategy.regional_params("a") - torch.tensor([2.0, 0.0])).norm()) < \
        0.5 * float((strategy.params - torch.tensor([2.0, 0.0])).norm())


def test_the_scale_is_the_minimiser_of_the_regions_validation_loss():
    """Validation optimum half-way along a's shrunk offset after round 1: ρ_a ≈ 1/2 (to the
    golden-section tolerance)."""
    clients, view = _shifted()
    unscaled = RegionFedPlus(RegionFedPlusConfig(two_level=False, validation_scale=False),
                             server_lr=1.0)
    run_rounds(unscaled, clients, view, rounds=1)
    midway = (unscaled.params + 0.5 * (unscaled.regional_params("a") - unscaled.params))
    clients, view = _validating({"a/0": midway.tolist(), "a/1": midway.tolist()})
    strategy = RegionFedPlus(RegionFedPlusConfig(two_level=False), server_lr=1.0)
    logs = run_rounds(strategy, clients, view, rounds=1)  # same round as the unscaled one
    assert logs[-1]["scale"]["a"] == pytest.approx(0.5, abs=0.01)


def test_without_the_switch_or_under_dp_no_validation_data_is_read():
    """validation_scale off, or DP on: no evaluate exchange, no scale in the log."""
    from regionfed.algorithms.base import EVALUATE

    for config, dp in ((RegionFedPlusConfig(two_level=False, validation_scale=False), None),
                       (RegionFedPlusConfig(two_level=False),
                        DPConfig(mode="user", sigma=1.0, clip=1.0, noise_seed=0))):
        clients, view = _shifted()
        kinds = []
        strategy = RegionFedPlus(config, server_lr=1.0, **({"dp": dp} if dp else {}))
        original = strategy.handle

        def handle(instruction, client, original=original, kinds=kinds):
            kinds.append(instruction.kind)
            return original(instruction, client)

        strategy.handle = handle
        logs = run_rounds(strategy, clients, view, rounds=2)
        assert EVALUATE not in kinds and all("scale" not in log for log in logs)
        assert strategy.scales == {}


def test_under_dp_plus_costs_what_fedavg_costs_at_the_same_sigma():
    """The split budget is one subsampled Gaussian at σ per region and round: the ledger's
    ε equals dp-accounting's for T such events, which is fedavg's ε."""
    clients, view = two_region_quadratics()
    dp = DPConfig(mode="user", sigma=1.5, clip=1.0, noise_seed=0)
    strategy = RegionFedPlus(RegionFedPlusConfig(two_level=False, regional_share=0.3),
                             sample_rate=0.5, dp=dp)
    ledger = PrivacyLedger(dp, 0.5)
    strategy.setup(torch.zeros(2), view, np.random.default_rng(0))
    for rnd in range(1, 4):
        exchange = strategy.run_round(rnd)
        instructions = next(exchange)
        try:
            exchange.send([strategy.handle(i, clients[i.client_id]) for i in instructions])
        except StopIteration:
            pass
        ledger.record_round(strategy.releases.drain())
    accountant = dp_accounting.pld.PLDAccountant()
    accountant.compose(dp_accounting.PoissonSampledDpEvent(
        0.5, dp_accounting.GaussianDpEvent(1.5)), 3)
    assert ledger.epsilon("pld") == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-6)
    assert all(0.0 <= a <= 1.0 for a in strategy.factors["a"])


@pytest.mark.parametrize("below", [0.0, 0.05])
def test_without_regional_signal_the_whole_budget_goes_to_the_global_release(below):
    """Identical regions under DP: the offsets are pure noise, α ≈ 0 after round 1, and with
    ``reallocate_below`` the later rounds release the global mean at σ (its noise std
    σC/(qN)) instead of σ/√(1 − f); ε stays fedavg's: one event at σ a round."""
    dim, sigma, f = 20_000, 2.0, 0.2
    clients = {f"{r}/{k}": QuadraticClient(f"{r}/{k}", r, 10, torch.zeros(dim))
               for r in "ab" for k in range(4)}  # θ = target: every update is exactly 0
    view = FederationView(("a", "b"), {c: c[0] for c in clients}, dict.fromkeys(clients, 10))
    dp = DPConfig(mode="user", sigma=sigma, clip=1.0)
    strategy = RegionFedPlus(RegionFedPlusConfig(two_level=False, regional_share=f,
                                                 reallocate_below=below),
                             sample_rate=1.0, dp=dp)
    ledger = PrivacyLedger(dp, 1.0)
    strategy.setup(torch.zeros(dim), view, np.random.default_rng(0))
    steps, logs = [], []
    for rnd in (1, 2, 3):
        before = strategy.params.clone()
        exchange = strategy.run_round(rnd)
        instructions = next(exchange)
        try:
            exchange.send([strategy.handle(i, clients[i.client_id]) for i in instructions])
        except StopIteration as done:
            logs.append(done.value)
        ledger.record_round(strategy.releases.drain())
        steps.append(float((strategy.params - before).std()))
    split_std, whole_std = sigma / 8 / math.sqrt(1 - f), sigma / 8  # C = 1, q·N = 8
    assert steps[0] == pytest.approx(split_std, rel=0.03)
    assert max(logs[0]["alpha"].values()) < 0.05  # no regional signal
    if below:
        assert steps[1] == pytest.approx(whole_std, rel=0.03)
        assert steps[2] == pytest.approx(whole_std, rel=0.03)
        assert logs[1]["regional_release"] is False and "regional_release" not in logs[0]
    else:
        assert steps[1] == pytest.approx(split_std, rel=0.03)
        assert "regional_release" not in logs[1]
    accountant = dp_accounting.pld.PLDAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(sigma), 3)
    assert ledger.epsilon("pld") == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-6)


def test_a_served_model_is_computed_once_per_state_and_follows_every_change():
    """θ_r is reused while θ, a_r and α_r stay the same (evaluation reads it per client), and
    recomputed after a new θ, an in-place change of θ or a_r, or new factors."""
    view = FederationView(regions=("a", "b"), client_region={"u": "a", "v": "b"},
                          num_examples={"u": 1, "v": 1})
    plus = RegionFedPlus()
    plus.setup(torch.zeros(4), view, np.random.default_rng(0))
    first = plus.regional_params("a")
    assert plus.regional_params("a") is first and torch.equal(first, torch.zeros(4))
    plus.offsets["a"] += 2.0  # in place
    assert torch.equal(plus.regional_params("a"), torch.full((4,), 2.0))
    plus.factors["a"] = [0.5] * len(plus.factors["a"])
    assert torch.equal(plus.regional_params("a"), torch.full((4,), 1.0))
    plus.params = plus.params + 1.0  # a new tensor
    assert torch.equal(plus.regional_params("a"), torch.full((4,), 2.0))
    plus.params.add_(1.0)  # in place
    assert torch.equal(plus.regional_params("a"), torch.full((4,), 3.0))
    assert torch.equal(plus.regional_params("b"), plus.params)


def test_bad_settings_are_config_errors():
    with pytest.raises(ConfigError, match="dp.mode user"):
        RegionFedPlus(dp=DPConfig(mode="region", sigma=1.0))
    with pytest.raises(ValueError):
        RegionFedPlusConfig(regional_share=1.0)
    for below in (-0.1, 1.0):
        with pytest.raises(ValueError):
            RegionFedPlusConfig(reallocate_below=below)
    for clip in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            RegionFedPlusConfig(regional_part="head", regional_clip=clip)
    with pytest.raises(ValueError, match="regional_part: head"):
        RegionFedPlusConfig(regional_clip=0.3)  # the whole model: a biased offset
    with pytest.raises(ValueError):
        RegionFedPlusConfig(personal_refresh_epochs=-1)
    with pytest.raises(ValueError, match="two_level"):
        RegionFedPlusConfig(personal_refresh_epochs=2, two_level=False)
    # the default refresh is simply inactive without two-level personalization, also where
    # a saved config (every field written) is read back: resuming a "no two-level" run
    assert not RegionFedPlusConfig(two_level=False).two_level
    saved = RegionFedPlusConfig(two_level=False).model_dump(mode="json")
    assert RegionFedPlusConfig(**saved) == RegionFedPlusConfig(two_level=False)
    clients, view = _shifted()
    from regionfed.errors import MethodNotApplicableError

    with pytest.raises(MethodNotApplicableError, match="head"):
        run_rounds(RegionFedPlus(RegionFedPlusConfig(regional_part="head")), clients, view, 1)


def test_the_cli_runs_plus_under_dp_at_fedavgs_epsilon(tmp_path, capsys):
    """End to end: regionfed-plus with two-level personalization trains and evaluates in
    process, and its ledger's ε is fedavg's at the same σ, q and rounds."""
    import json

    from test_cli import SMALL, run_cli

    out = tmp_path / "run"
    code, stdout, _ = run_cli(capsys, "run", *SMALL, "--methods", "fedavg,regionfed-plus",
                              "--rounds", "2", "--sample-rate", "0.5", "--dp-sigma", "1",
                              "--out", str(out))
    assert code == 0 and "| regionfed-plus" in stdout
    seeds = json.loads((out / "results.json").read_text())["methods"]["regionfed-plus"]["seeds"]
    choices = seeds[0]["diagnostics"]["choices"]  # every client's pick, by region
    assert sum(sum(c.values()) for c in choices.values()) == len(seeds[0]["per_client"])
    privacy = json.loads((out / "privacy.json").read_text())["methods"]
    assert privacy["regionfed-plus"]["epsilon_pld"] == pytest.approx(
        privacy["fedavg"]["epsilon_pld"], rel=1e-9)


@pytest.mark.parametrize("clip_r", [None, 0.25])
def test_the_regional_clip_sets_the_offsets_noise_and_the_variance_shrinkage_assumes(clip_r):
    """Identical regions whose updates are all 0, under DP: after one round a region's offset
    (on the declared head, the model's first 15,000 entries) is pure noise, per coordinate of
    std √(σ_r²C_r²/(q n_r)² + σ_g²C²/(qN)²) — the variance the shrinkage is told
    (noise_var) — at C_r = C by default or the ``regional_clip``; none off the head."""
    dim, sigma, f = 20_000, 2.0, 0.2
    clients = {f"{r}/{k}": QuadraticClient(f"{r}/{k}", r, 10, torch.zeros(dim))
               for r in "ab" for k in range(4)}
    view = FederationView(("a", "b"), {c: c[0] for c in clients}, dict.fromkeys(clients, 10),
                          parameter_groups={"head": (ParameterBlock("head.w", 0, (15_000,)),)})
    strategy = RegionFedPlus(RegionFedPlusConfig(two_level=False, regional_share=f,
                                                 regional_part="head", regional_clip=clip_r),
                             sample_rate=1.0, dp=DPConfig(mode="user", sigma=sigma, clip=1.0))
    run_rounds(strategy, clients, view, 1, init=torch.zeros(dim))
    c_r = 1.0 if clip_r is None else clip_r
    variance = (sigma / math.sqrt(f) * c_r / 4) ** 2 + (sigma / math.sqrt(1 - f) / 8) ** 2
    for region in "ab":
        offset = strategy.offsets[region]
        assert float(offset[:15_000].std()) == pytest.approx(math.sqrt(variance), rel=0.03)
        assert not offset[15_000:].any()
        assert strategy.noise_var[region] == pytest.approx([variance] * len(strategy.blocks))


def test_the_regional_models_a_run_keeps_are_the_served_ones_even_with_on_device_choice():
    """With two-level personalization each client is evaluated on its device, but the server
    still keeps and sends θ_r: a run saves (and the audit scores) those, for every region
    with ``unchanged`` and for those that differ from θ without; Ditto keeps none."""
    from regionfed.algorithms.ditto import Ditto
    from regionfed.runtime.simulator import regional_models

    clients, view = _shifted()
    plus = RegionFedPlus(RegionFedPlusConfig(two_level=True, shrinkage=False))
    run_rounds(plus, clients, view, 2)
    assert plus.evaluates_on_client
    kept = regional_models(plus)
    assert set(kept) == set(view.regions)
    for region, params in kept.items():
        assert torch.equal(params, plus.regional_params(region))
        assert not torch.equal(params, plus.params)
    ditto = Ditto()
    run_rounds(ditto, clients, view, 1)
    assert regional_models(ditto) == {} and regional_models(ditto, unchanged=True) == {}


def test_the_signal_share_of_a_displacement_is_its_james_stein_share():
    """d = s + n with E‖n‖² = 4d known (std √(2d)·4): ‖s‖² = 25·E‖n‖² → 25/26; pure noise
    → 0 on nearly every draw (its excess is within 2 std 97.7 % of the time); a signal whose
    energy is 10 std of the noise's is detected, one of 0.5 std is not; no noise → 1."""
    g = torch.Generator().manual_seed(0)
    dim = 20_000
    mean, std = 4.0 * dim, 4.0 * math.sqrt(2 * dim)
    assert signal_share(10.0 * torch.randn(dim, generator=g)
                        + 2.0 * torch.randn(dim, generator=g), mean, std) == \
        pytest.approx(25 / 26, abs=0.01)
    draws = [signal_share(2.0 * torch.randn(dim, generator=g), mean, std) for _ in range(200)]
    assert sum(share > 0 for share in draws) <= 15  # ~2.3 % expected: 4.6 of 200
    assert max(draws) < 0.05
    direction = torch.zeros(dim)
    direction[0] = 1.0
    for excess_std, detected in ((10.0, True), (0.5, False)):
        signal = math.sqrt(excess_std * std) * direction  # ‖s‖² = excess_std · std
        shares = [signal_share(signal + 2.0 * torch.randn(dim, generator=g), mean, std)
                  for _ in range(20)]
        assert (sum(share > 0 for share in shares) >= 18) if detected else \
            (sum(share > 0 for share in shares) <= 6)
    assert signal_share(torch.zeros(dim), 0.0) == 1.0
    assert signal_share(torch.zeros(dim), 1.0) == 0.0


def _zero_update_regions(dim: int, sigma: float, shrinkage: bool) -> tuple[dict, FederationView,
                                                                         RegionFedPlus]:
    """Identical regions whose updates are all 0 (θ = target): under DP every released mean
    is pure noise."""
    clients = {f"{r}/{k}": QuadraticClient(f"{r}/{k}", r, 10, torch.zeros(dim))
               for r in "ab" for k in range(4)}
    view = FederationView(("a", "b"), {c: c[0] for c in clients}, dict.fromkeys(clients, 10))
    strategy = RegionFedPlus(RegionFedPlusConfig(two_level=False, regional_share=0.2,
                                                 shrinkage=shrinkage),
                             sample_rate=1.0, dp=DPConfig(mode="user", sigma=sigma, clip=1.0))
    return clients, view, strategy


@pytest.mark.parametrize("shrinkage", [False, True])
def test_the_served_models_noise_energy_is_what_its_releases_added(shrinkage):
    """After rounds of zero updates θ_r − θ_0 is noise only: its energy is
    served_noise_energy (σ, f, C, q·n, α public) within 4 of its χ² standard deviations
    (with shrinkage, whose α reads the same noise, within 6 %), and the anchor share of
    such a θ_r is ≈ 0 (no signal to anchor on)."""
    dim = 20_000
    clients, view, strategy = _zero_update_regions(dim, sigma=2.0, shrinkage=shrinkage)
    run_rounds(strategy, clients, view, 2, init=torch.zeros(dim))
    per_round_g = (2.0 / math.sqrt(0.8) / 8) ** 2  # global: σ/√(1 − f)·C/(qN)
    per_round_r = (2.0 / math.sqrt(0.2) / 4) ** 2  # regional: σ/√f·C/(q n_r)
    assert strategy.global_noise_var == pytest.approx(2 * per_round_g)
    assert strategy.regional_noise_var["a"] == pytest.approx(2 * per_round_r)
    for region in "ab":
        energy, std = strategy.served_noise_energy(region)
        measured = float(strategy.regional_params(region).double().pow(2).sum())
        if shrinkage:  # α is estimated from the same noisy offsets: a few % of bias
            assert measured == pytest.approx(energy, rel=0.06)
        else:
            assert abs(measured - energy) < 4 * std
        assert strategy.anchor_share(region) < 0.05
    if not shrinkage:  # α = 1: θ_r carries the regional means' noise only
        per_coordinate = 2 * per_round_r
        assert strategy.served_noise_energy("a") == pytest.approx(
            (dim * per_coordinate, math.sqrt(2 * dim) * per_coordinate))


def test_a_noise_aware_anchor_sends_lambda_or_0_and_the_personal_model_uses_it():
    """Every training instruction of a region carries λ where θ_r shows signal over its DP
    noise and 0 where it shows none (the share, logged as anchor_share: ≈ 1 where θ_r's
    displacement is mostly signal, σ tiny; 0 where it is all noise, σ huge); without DP or
    without the switch λ is unchanged (and not sent)."""
    dim = 2_000
    targets = {"a/0": 0, "a/1": 0, "b/0": 1, "b/1": 1}

    def federation():
        clients = {}
        for c, axis in targets.items():
            target = torch.zeros(dim)
            target[axis] = 3.0
            clients[c] = QuadraticClient(c, c[0], 10, target)
        return clients, FederationView(("a", "b"), {c: c[0] for c in clients},
                                       dict.fromkeys(clients, 10))

    def instructions_of_round(strategy, rounds):
        clients, view = federation()
        logs = run_rounds(strategy, clients, view, rounds - 1, init=torch.zeros(dim))
        sent = next(strategy.run_round(rounds))
        return [i for i in sent if not i.config.get("personal_init")], logs

    config = RegionFedPlusConfig(noise_aware_anchor=True, personal_lambda=0.5)
    for sigma, low, high in ((1e-4, 0.9, 1.0), (50.0, 0.0, 0.0)):
        dp = DPConfig(mode="user", sigma=sigma, clip=1.0, noise_seed=0)
        strategy = RegionFedPlus(config, sample_rate=1.0, dp=dp)
        sent, logs = instructions_of_round(strategy, 4)
        shares = logs[-1]["anchor_share"]
        assert all(low <= shares[r] <= high for r in "ab"), shares
        for ins in sent:
            share = strategy.anchor_share(ins.region)
            assert ins.config[PERSONAL_LAMBDA] == (0.5 if share > 0 else 0.0)
    sent, logs = instructions_of_round(RegionFedPlus(config, sample_rate=1.0), 3)
    assert all(PERSONAL_LAMBDA not in ins.config for ins in sent)  # no DP: λ as configured
    assert "anchor_share" not in logs[-1]
    off = RegionFedPlus(RegionFedPlusConfig(personal_lambda=0.5, noise_aware_anchor=False),
                        sample_rate=1.0,
                        dp=DPConfig(mode="user", sigma=50.0, clip=1.0, noise_seed=0))
    sent, logs = instructions_of_round(off, 3)
    assert all(PERSONAL_LAMBDA not in ins.config for ins in sent)
    assert "anchor_share" not in logs[-1]
    assert RegionFedPlusConfig().noise_aware_anchor  # the default
    # the client trains its personal model with the λ it was sent
    clients, view = federation()
    strategy = RegionFedPlus(config, sample_rate=1.0)
    run_rounds(strategy, clients, view, 1, init=torch.zeros(dim))
    client, anchor = clients["a/0"], torch.full((dim,), 4.0)
    kept = client.state["personal"].clone()
    free, _ = client.train(kept)
    pulled, _ = client.train(kept, extra_loss=proximal_term(anchor, 0.5))
    for lam, want in ((0.0, free), (0.5, pulled)):
        client.state["personal"] = kept
        strategy.handle(TrainInstruction("a/0", "a", anchor, {PERSONAL_LAMBDA: lam}), client)
        assert torch.allclose(client.state["personal"], want)
    assert not torch.allclose(free, pulled)


def test_a_client_whose_served_model_is_all_noise_is_evaluated_with_its_own_training():
    """Under the noise-aware anchor, a region whose θ_r shows no signal over its DP noise
    (share 0) evaluates each client with its kept personal model, trained on (λ = 0, not
    kept) until it has had ``personal_refresh_epochs`` = 3 epochs of its data in all — a
    quadratic client's k epochs from x give x + (1 − 0.5^k)(t − x) — never with the server's
    models, and without scoring anything (no choice); a client with no personal model starts
    from the public initial model θ_0, which the node is sent with the share."""
    dim = 20_000
    clients, view, _ = _zero_update_regions(dim, sigma=2.0, shrinkage=True)
    for client in clients.values():
        client.target = torch.full((dim,), 2.0)  # the clients' own optimum (θ = 0 still)
    dp = DPConfig(mode="user", sigma=2.0, clip=1.0, noise_seed=3)
    config = RegionFedPlusConfig(personal_refresh_epochs=3, personal_lambda=0.5,
                                 noise_aware_anchor=True)
    strategy = RegionFedPlus(config, sample_rate=1.0, dp=dp)
    run_rounds(strategy, clients, view, 2, init=torch.zeros(dim))
    client = clients["a/0"]
    assert client.state[PERSONAL_EPOCHS] == 2  # two rounds of E = 1, counted on the device
    strategy.shares["a"] = (strategy.shares["a"][0], 0.0)  # the noise-only θ_r, exactly
    kept = torch.ones(dim)
    client.state["personal"] = kept
    client.score_ = [0.1, 0.1, 0.1, 0.1]  # would be read by a choice: none is made
    for trained, want in ((1, kept + 0.75 * (client.target - kept)),
                          (2, kept + 0.5 * (client.target - kept)), (3, kept), (5, kept)):
        client.state[PERSONAL_EPOCHS] = trained
        assert torch.allclose(strategy.eval_params("a/0", "a", client), want)
        assert strategy.choices["a/0"] == ("refreshed" if trained < 3 else "personal")
    assert strategy.eval_params("a/0", "a", client) is kept
    assert client.score_ == [0.1, 0.1, 0.1, 0.1]
    from_initial = (1 - 0.5 ** 3) * client.target  # θ_0 = 0
    arrays = strategy.client_evaluation_arrays("a")
    assert float(arrays["anchor_share"][0]) == 0.0
    assert torch.equal(arrays["regional"], torch.zeros(dim))  # θ_0, not the noisy θ_r
    node = RegionFedPlus(config, sample_rate=1.0, dp=dp)
    node.receive_client_evaluation_arrays("a", {"regional": arrays["regional"],
                                                "anchor_share": torch.tensor([0.5])})
    assert node.served_share("a") == 0.5
    node.receive_client_evaluation_arrays("a", arrays)
    assert node.served_share("a") == 0.0
    fresh = clients["a/1"]
    fresh.state = {}
    assert torch.allclose(node.eval_params("a/1", "a", fresh), from_initial)
    # a share above 0: the usual choice among all four (the regional model clears the bar)
    strategy.shares["a"] = (strategy.shares["a"][0], 0.2)
    client.score_ = [0.1, 0.9, 0.9, 0.1]  # refreshed, regional, global, personal
    assert torch.equal(strategy.eval_params("a/0", "a", client),
                       strategy.regional_params("a"))
    assert client.score_ == []
