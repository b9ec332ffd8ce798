"""Privacy by construction, end to end in the simulator: noise nobody can regenerate, a
ledger that composes exactly what the mechanism noised, and private model selection."""

from collections import Counter

import numpy as np
import pytest
import torch

import regionfed.privacy.mechanism as mechanism
from regionfed.algorithms.registry import METHODS, build_strategy
from regionfed.config import build_config
from regionfed.errors import ConfigError, MethodNotApplicableError
from regionfed.privacy.ledger import PrivacyLedger
from regionfed.privacy.releases import PrivateReleases
from regionfed.runtime.params import get_flat
from regionfed.runtime.simulator import Simulator, derived_seed

SIGMA, CLIP, Q = 1.0, 1.0, 0.5


def _config(methods=("fedavg",), **dp):
    return build_config({
        "methods": list(methods), "dataset": "esci-synth",
        "data": {"num_queries": 600, "num_regions": 2, "clients_per_region": 3,
                 "vocab_size": 1000},
        "model": {"dim": 32, "heads": 2, "ngram_buckets": 512},
        "training": {"rounds": 1, "sample_rate": Q, "eval_every": 1},
        "dp": {"mode": "user", "sigma": SIGMA, "clip": CLIP, **dp}})


def _run(method, config, federation, task, seed=0):
    strategy = build_strategy(method, config)
    ledger = PrivacyLedger(config.dp, config.training.sample_rate)
    simulator = Simulator(federation, task, config.training, seed)
    init = get_flat(simulator.model).clone()
    run = simulator.run(strategy, ledger=ledger)
    return strategy, ledger, run, init


def test_same_seed_dp_on_gives_different_models_and_dp_off_the_same(tiny_federation,
                                                                    tiny_task):
    private = _config()
    first = _run("fedavg", private, tiny_federation, tiny_task)[2].final_params
    second = _run("fedavg", private, tiny_federation, tiny_task)[2].final_params
    assert not torch.equal(first, second)
    off = _config(mode="off")
    first = _run("fedavg", off, tiny_federation, tiny_task)[2].final_params
    second = _run("fedavg", off, tiny_federation, tiny_task)[2].final_params
    assert torch.equal(first, second)


def _attacker_guesses(seed: int) -> list[torch.Generator]:
    """Every generator an attacker who reads config.yaml could rebuild: the run seed, the
    strategy's seeded rng (what the noise was drawn from before), a first draw of it."""
    rng = np.random.default_rng(derived_seed(seed, 7919))
    return [torch.Generator().manual_seed(s) for s in
            (seed, derived_seed(seed, 7919), int(rng.integers(2**62)))]


def test_an_attacker_with_the_config_cannot_subtract_the_noise(tiny_federation, tiny_task,
                                                               monkeypatch):
    """Play the attacker: regenerate the noise from everything in config.yaml and subtract
    it from the released aggregate. It recovers the clipped sum only when the run used a
    test noise_seed (which the ledger labels 'not private')."""
    released = []

    def keep(total, std, generator):  # the clipped sum and the noise std of each release
        released.append((total.clone(), std))
        return original(total, std, generator)

    original = mechanism._gaussian
    monkeypatch.setattr(mechanism, "_gaussian", keep)
    for config, recovered in ((_config(), False), (_config(noise_seed=5), True)):
        released.clear()
        strategy, ledger, run, init = _run("fedavg", config, tiny_federation, tiny_task)
        [(clipped_sum, std)] = released
        # what is public: the new global model; FedAvg: θ¹ = θ⁰ − (sum + noise)/(q·N)
        noisy_sum = (init - run.final_params).double() * Q * len(tiny_federation.clients)
        guesses = _attacker_guesses(0)
        if config.dp.noise_seed is not None:
            guesses.append(torch.Generator().manual_seed(config.dp.noise_seed))
        errors = [float((noisy_sum - torch.randn(clipped_sum.shape, generator=g,
                                                 dtype=clipped_sum.dtype).double() * std
                         - clipped_sum.double()).abs().max()) for g in guesses]
        assert (min(errors) < 1e-3) is recovered, errors
        assert (ledger.to_dict()["noise"] == "OS entropy") is not recovered


def _spy_on_noise(monkeypatch):
    """Record every Gaussian draw, grouped by the release event it ends up in."""
    draws, groups = [], []
    original_draw, original_record = mechanism._gaussian, PrivateReleases._record

    def draw(like, std, generator):
        draws.append((std, like.numel()))
        return original_draw(like, std, generator)

    def record(self, what, noise_multiplier, vectors, regions):
        groups.append((what, list(draws)))
        draws.clear()
        return original_record(self, what, noise_multiplier, vectors, regions)

    monkeypatch.setattr(mechanism, "_gaussian", draw)
    monkeypatch.setattr(PrivateReleases, "_record", record)
    return groups


FEDERATED = [name for name, spec in METHODS.items() if spec.kind == "federated"]


@pytest.mark.parametrize("method", FEDERATED)
def test_the_ledger_composes_exactly_what_was_noised(method, tiny_federation, tiny_task,
                                                     monkeypatch):
    """Spy on the noise: each release's draws give its joint size k and its σ (noise std /
    per-vector sensitivity, over √k); the ledger must hold exactly those events, at the
    run's q, and nothing else."""
    groups = _spy_on_noise(monkeypatch)
    config = _config([method])
    try:
        strategy, ledger, _, _ = _run(method, config, tiny_federation, tiny_task)
    except MethodNotApplicableError as refused:
        # a method without a user-level guarantee (fedtp) must refuse DP before noising
        assert "no user-level DP guarantee" in str(refused) and not groups
        return
    noised = Counter()
    global_std = None  # a split budget's global draw, shared by the round's regional events
    for what, draws in groups:
        k = len(draws)
        assert k >= 1, f"{what}: recorded without noising anything"
        if "split budget" in what:  # (global at σ_g, region's at σ_r): one joint Gaussian
            if k == 2:
                global_std = draws[0][0]
            regional_std = draws[-1][0]
            sigma = ((CLIP / global_std) ** 2 + (CLIP / regional_std) ** 2) ** -0.5
            assert sigma == pytest.approx(SIGMA)
            noised[(what, round(SIGMA, 9), 2)] += 1
            continue
        if what.startswith("model selection"):  # clamped scores: sensitivity ‖bounds‖₂
            b, entries = config.dp.selection_clip, draws[0][1]
            accuracy = "accuracy" in what
            sensitivity = (((entries - 1) * b * b + 1.0) if accuracy else entries * b * b) ** 0.5
            sigma = draws[0][0] / sensitivity
            assert sigma == pytest.approx(config.dp.noise_multiplier_of_selection)
        else:
            assert {std for std, _ in draws} == {SIGMA * CLIP}
            sigma = SIGMA / k ** 0.5
        noised[(what, round(sigma, 9), k)] += 1
    recorded = Counter()
    for (what, q, sigma, vectors, _), count in ledger.event_counts.items():
        assert q == Q
        recorded[(what, round(sigma, 9), vectors)] += count
    assert recorded == noised
    assert ledger.to_dict()["unaccounted"] == []
    if not strategy.shares_updates:
        assert not groups and ledger.epsilon() == 0.0


@pytest.mark.parametrize("variant", ["grad", "interp", "meta", "dynamic", "ensemble"])
def test_regionfed_choices_under_dp_are_private_releases(variant, tiny_federation, tiny_task):
    config = _config([f"regionfed-{variant}"])
    strategy, ledger, run, _ = _run(f"regionfed-{variant}", config, tiny_federation,
                                    tiny_task)
    record = ledger.to_dict()
    assert record["unaccounted"] == []
    selection = [e for e in record["events"] if e["what"].startswith("model selection")]
    assert sum(e["count"] for e in selection) == len(tiny_federation.regions)
    log = run.history[0]
    assert "val_accuracy" not in log and "val_loss_rho" not in log  # nothing un-noised
    if variant in ("dynamic", "ensemble"):
        assert all("accuracy" in e["what"] for e in selection)


def test_golden_section_under_dp_is_refused_unless_explicitly_uncovered(tiny_federation,
                                                                        tiny_task):
    with pytest.raises(ConfigError, match="allow_unaccounted"):
        build_strategy("regionfed-grad", _config(["regionfed-grad"]).model_copy(
            update={"regionfed": _config().regionfed.model_copy(
                update={"rho_selection": "golden"})}))
    config = build_config({**_config(["regionfed-grad"]).model_dump(mode="json"),
                           "regionfed": {"rho_selection": "golden"},
                           "dp": {"mode": "user", "sigma": SIGMA, "allow_unaccounted": True}})
    _, ledger, _, _ = _run("regionfed-grad", config, tiny_federation, tiny_task)
    record = ledger.to_dict()
    assert record["unaccounted"] == ["ρ search (un-noised validation data)"]
    assert "NOT covered" in record["protects"]


def test_one_clients_validation_data_moves_rho_only_through_the_noisy_release(
        tiny_federation, tiny_task, monkeypatch):
    """Same test noise (noise_seed), one client's validation labels changed: the released
    score vectors differ by at most twice the release's add/remove sensitivity over its
    denominator (replacing one user's vector), and in both runs ρ is the argmin of what was
    released — the data reach ρ only through it."""
    import copy

    released = []
    original = PrivateReleases.bounded_mean

    def keep(self, vectors, weights, low, high, expected, **kw):
        out = original(self, vectors, weights, low, high, expected, **kw)
        released.append((out.clone(), mechanism.bound_sensitivity(low, high) / expected))
        return out

    monkeypatch.setattr(PrivateReleases, "bounded_mean", keep)
    # a clamp wide enough that the victim's loss differences are not all cut to ±b
    config = _config(["regionfed-grad"], noise_seed=11, selection_clip=10.0)
    # every client scores the grid (q = 1), so the victim is surely in its region's release
    config = config.model_copy(update={
        "training": config.training.model_copy(update={"sample_rate": 1.0}),
        # plain argmin over the released means, so the check below is not vacuous
        "regionfed": config.regionfed.model_copy(update={"selection_margin": 0.0})})
    changed = copy.deepcopy(tiny_federation)
    victim = changed.clients[0]
    victim.val.intent = [(i + 1) % 4 for i in victim.val.intent]
    runs = []
    for federation in (tiny_federation, changed):
        released.clear()
        strategy, _, run, _ = _run("regionfed-grad", config, federation, tiny_task)
        runs.append((list(released), run.history[0]["rho"]))
    regions = list(tiny_federation.regions)
    moved = []
    for (before, bound), (after, _) in zip(runs[0][0], runs[1][0], strict=True):
        moved.append(float(torch.linalg.vector_norm(before - after)))
        assert moved[-1] <= 2 * bound + 1e-9
    assert max(moved) > 0  # the victim was sampled: its region's release did move
    grid = [0.0, 0.5, 1.0, 1.5, 2.0]  # ρ = 0 and 4 points on (0, 2]
    assert any(r != 0.0 for _, rho in runs for r in rho.values())  # a real choice
    for releases, rho in runs:
        for region, (mean, scale) in zip(regions, releases, strict=True):
            gains = [0.0] + mean.tolist()
            margin = config.regionfed.selection_margin * SIGMA * scale
            eligible = [0] + [j for j in range(1, 5) if gains[j] < -margin]
            assert rho[region] == grid[min(eligible, key=lambda j: (gains[j], j))]
