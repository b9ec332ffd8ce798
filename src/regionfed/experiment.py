"""One experiment: every configured method × seed on one federation → ``runs/<name>/``.

Outputs: ``config.yaml``, ``metrics.jsonl`` (one line per method, seed and round),
``results.json`` (a stable schema, docs/cli.md), ``checkpoints/<method>-seed<k>.safetensors``
(final global model of trained methods), ``checkpoints/<method>-seed<k>.regions.safetensors``
(each region's final model as a flat vector, for region-personalized methods) and
``partial/`` (finished method × seed results, so ``--resume`` can skip them).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from regionfed import metrics
from regionfed.algorithms.registry import get_method
from regionfed.config import RunConfig, build_config, load_config, set_dotted
from regionfed.data.federation import Federation
from regionfed.data.registry import build_federation
from regionfed.errors import ConfigError, MethodNotApplicableError
from regionfed.io import append_jsonl, save_checkpoint, write_atomic, write_json
from regionfed.models.registry import build_task
from regionfed.models.tasks import Task
from regionfed.privacy.ledger import (
    DETERMINISTIC_NOISE,
    PrivacyLedger,
    compute_epsilon,
    with_uncovered,
)
from regionfed.runtime.device import resolve_device
from regionfed.runtime.evaluation import FederationEvaluator
from regionfed.runtime.params import set_flat
from regionfed.runtime.pooled import reweighting_is_identity, run_pooled
from regionfed.runtime.round_checkpoint import RoundCheckpoints, run_identity
from regionfed.runtime.runtimes import runtime_for
from regionfed.runtime.simulator import FederatedRun
from regionfed.runtime.threads import use_free_cores
from regionfed.runtime.workers import (
    auto_workers,
    pool_order,
    run_in_workers,
    worker_threads,
)
from regionfed.tuning import candidates, choose, final_validation_overall

SUMMARY_KEYS = ("overall", "intent", "spell", "ner_f1", "ner_entity_f1", "rrs",
                "worst_region", "region_std")


@dataclass
class MethodOutcome:
    method: str
    seed: int
    test: dict[str, Any]
    history: list[dict[str, Any]]
    seconds: float
    privacy: dict[str, Any] | None = None

    @property
    def epsilon(self) -> float | None:
        """ε (PLD) spent; ``None`` = ∞ (no DP, or a method that is not federated)."""
        if self.privacy is None or self.privacy["epsilon_infinite"]:
            return None
        return self.privacy["epsilon_pld"]


def run_method(method: str, federation: Federation, task: Task, config: RunConfig, seed: int,
               evaluator: FederationEvaluator, on_round: Callable[[dict], None] | None = None,
               checkpoints: RoundCheckpoints | None = None
               ) -> tuple[MethodOutcome, FederatedRun | None]:
    """Train and evaluate one method with one seed (no file output but ``checkpoints``:
    round checkpoints of an in-process federated run, resumed from if present)."""
    spec = get_method(method)
    start = time.perf_counter()
    run: FederatedRun | None = None
    privacy: dict[str, Any] | None = None
    if spec.kind == "reference":
        pooled_train = evaluator.pooled_split("train")
        test = evaluator.evaluate(
            "test", lambda c: task.reference_predictions(pooled_train, c.test))
        history: list[dict[str, Any]] = []
    elif spec.kind == "pooled":
        run = run_pooled(federation, task, config.training, seed,
                         reweight_regions=spec.reweight_regions, evaluator=evaluator,
                         on_round=on_round)
        test, history = run.test, run.history
    else:
        trained = runtime_for(config, federation, task, evaluator, checkpoints).run(
            method, seed, on_round)
        run, test, history, privacy = trained.run, trained.test, trained.run.history, \
            trained.privacy
    seconds = time.perf_counter() - start
    if checkpoints is not None:  # a resumed run adds the time before it was interrupted
        seconds += checkpoints.seconds_before_resume
    return MethodOutcome(method, seed, test, history, seconds, privacy), run


def check_privacy_budget(config: RunConfig) -> None:
    """Raise :class:`ConfigError` now if ``training.target_epsilon`` rules out a configured
    federated method (before any folder is created or any time is spent).

    Every round of a federated method releases at least one Poisson-subsampled Gaussian at
    σ (the model update); if that alone exceeds the target, no round fits. How many rounds
    fit is decided during the run from the releases the mechanism records
    (:class:`~regionfed.runtime.simulator.RoundBudget`)."""
    target = config.training.target_epsilon
    if target is None:
        return
    ledger = PrivacyLedger(config.dp, config.training.sample_rate)
    if not ledger.config.adds_noise:
        raise ConfigError("target_epsilon needs differential privacy: set dp.mode to user or "
                          "region and dp.sigma > 0")
    one_round = compute_epsilon(config.dp.sigma, ledger.accounting_sample_rate, 1,
                                config.dp.delta)
    for method in config.methods:
        spec = get_method(method)
        if (spec.kind == "federated" and getattr(spec.strategy, "shares_updates", True)
                and one_round > target):
            raise ConfigError(f"a single round of {method} already exceeds target epsilon "
                              f"{target} (sigma {config.dp.sigma}); raise sigma or the target")


def with_overrides(config: RunConfig, overrides: dict[str, Any]) -> RunConfig:
    """``config`` with dotted keys replaced (validated like any configuration)."""
    data = config.model_dump(mode="json")
    for key, value in overrides.items():
        set_dotted(data, key, value)
    return build_config(data)


def tune_method(method: str, federation: Federation, task: Task, config: RunConfig,
                evaluator: FederationEvaluator) -> tuple[RunConfig, dict[str, Any]]:
    """Fair tuning (:mod:`regionfed.tuning`): run every grid point of ``method`` on the
    tuning seed; return the configuration with the best validation Overall and the record
    of the search (chosen values, every candidate's score)."""
    spec = get_method(method)
    scored = []
    grid = candidates(config.tuning, spec.key_hyperparameter)
    for overrides in tqdm(grid, desc=f"  tuning {method}", leave=False,
                          disable=len(grid) < 2):
        outcome, _ = run_method(method, federation, task, with_overrides(config, overrides),
                                config.tuning.seed, evaluator)
        scored.append((overrides, final_validation_overall(outcome.history)))
    chosen = choose(scored)
    record = {"chosen": chosen, "seed": config.tuning.seed,
              "candidates": [{**o, "val_overall": v} for o, v in scored]}
    return with_overrides(config, chosen), record


def unique_run_dir(base: Path) -> Path:
    """``base`` if unused, else ``base-2``, ``base-3``, … (never overwrite a finished run)."""
    if not base.exists():
        return base
    k = 2
    while Path(f"{base}-{k}").exists():
        k += 1
    return Path(f"{base}-{k}")


@contextmanager
def removed_if_start_fails(out: Path) -> Iterator[None]:
    """Delete ``out`` again if the body fails before leaving anything ``--resume`` could use.

    A run refused at start (bad data file, a method that can't be built, Ctrl-C while the
    federation loads) must leave no folder behind, or the retry silently goes to
    ``out-2``. A folder this call did not create, or one that holds a finished method × seed
    (``partial/``) or a round checkpoint (``state/``), is kept.
    """
    created = not out.exists()
    try:
        yield
    except BaseException:
        if created and out.is_dir() and not _has_resumable_work(out):
            shutil.rmtree(out, ignore_errors=True)
        raise


def _has_resumable_work(out: Path) -> bool:
    return any(path.is_file() and path.parent.name in ("partial", "state")
               for path in out.rglob("*"))


def _partial_path(out: Path, method: str, seed: int) -> Path:
    return out / "partial" / f"{method}__seed{seed}.json"


def run_experiment(config: RunConfig, out: Path, *, progress: bool = True,
                   resume: bool = False, threads: int | None = None,
                   jobs: int | None = 1) -> dict[str, Any]:
    """Run every method × seed, writing outputs under ``out``; returns ``results.json``.

    ``jobs`` > 1 trains that many methods × seeds at once in worker processes
    (:func:`_train_in_workers`), each with its share of the cores; ``None`` picks one worker
    per free core (:func:`~regionfed.runtime.workers.auto_workers`; 1 under
    ``OMP_NUM_THREADS``, on an accelerator or a Flower runtime). In one process it trains with
    ``threads`` torch threads, or (None) as many as the cores other work leaves free
    (:func:`regionfed.runtime.threads.use_free_cores`). What was picked is said on stderr
    with progress. Results do not depend on ``jobs`` beyond float summation order (threads).
    A run that fails before finishing anything resumable leaves no folder
    (:func:`removed_if_start_fails`)."""
    check_privacy_budget(config)  # a budget no method can meet must not leave a run folder
    if jobs is not None and jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {jobs}")
    trainable = _trainable_jobs(config)
    if not _parallel_capable(config):
        jobs = 1
    workers = min(auto_workers(len(trainable)) if jobs is None else jobs,
                  len(trainable)) or 1
    if workers > 1:
        if progress:
            print(f"workers: {workers} processes × {worker_threads(workers)} thread(s) "
                  f"for {len(trainable)} method × seed runs", file=sys.stderr)
    elif threads is None:
        _, why = use_free_cores()
        if progress:
            print(f"threads: {why}", file=sys.stderr)
    else:
        torch.set_num_threads(threads)
    with removed_if_start_fails(out):
        return _run_experiment(config, out, progress, resume, workers)


def _trainable_jobs(config: RunConfig) -> list[tuple[str, int]]:
    """The methods × seeds that train (every method but the reference ones)."""
    return [(m, s) for m in config.methods if get_method(m).kind != "reference"
            for s in range(config.seeds)]


def reused_runs(config: RunConfig, federation: Federation) -> dict[str, tuple[str, str]]:
    """Methods of ``config`` whose run is, on ``federation``, the very computation of another
    method of the run: method → (that method, why). ``centralized-rw`` where every region
    holds the same number of training examples weighs every example exactly 1 — the
    ``centralized`` run, same seed, same batches, bit for bit (``make run``'s federation:
    8 × 1,800) — so its record is that run's, marked ``reused_from``, instead of the same
    36 s of training twice. Not with tuning (each method tunes on its own)."""
    if config.tuning.enabled:
        return {}
    plain = [m for m in config.methods
             if get_method(m).kind == "pooled" and not get_method(m).reweight_regions]
    balanced = [m for m in config.methods
                if get_method(m).kind == "pooled" and get_method(m).reweight_regions]
    if not plain or not balanced or not reweighting_is_identity(federation):
        return {}
    size = next(iter(federation.region_sizes("train").values()))  # all equal here
    why = (f"every region holds {size:,} training examples, so every weight "
           "N / (M · n_r) of the region-balanced loss is exactly 1 (the same computation, "
           "same seed)")
    return {m: (plain[0], why) for m in balanced}


def _reuse_run(out: Path, source: str, method: str, seed: int, record: dict[str, Any],
               why: str) -> dict[str, Any]:
    """``method`` × ``seed`` as the finished run of ``source`` it equals (:func:`reused_runs`):
    that record marked ``reused_from``, its round logs and its checkpoint under ``method``."""
    _keep_metric_lines(out, method, seed, 0)  # a resumed run's earlier copy, if any
    path = out / "metrics.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()] \
        if path.exists() else []
    for entry in lines:
        if entry.get("method") == source and entry.get("seed") == seed:
            append_jsonl(path, {**entry, "method": method})
    checkpoint = out / "checkpoints" / f"{source}-seed{seed}.safetensors"
    if checkpoint.exists():
        shutil.copyfile(checkpoint, out / "checkpoints" / f"{method}-seed{seed}.safetensors")
    return {**record, "reused_from": source, "reused_because": why}


def _parallel_capable(config: RunConfig) -> bool:
    """Whether methods may train in worker processes: in-process runtime on the CPU (an
    accelerator is one device to share; a Flower runtime runs its own processes and ports)."""
    return config.runtime == "inprocess" and \
        resolve_device(config.training.device).type == "cpu"


def _run_experiment(config: RunConfig, out: Path, progress: bool,
                    resume: bool, workers: int = 1) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    config_path = out / "config.yaml"
    if resume:
        if not config_path.exists():
            raise ConfigError(f"cannot resume: {config_path} does not exist")
        saved = build_config(load_config(config_path))
        if _as_json(saved) != _as_json(config):
            # finished method × seed results of another configuration must never be mixed in
            raise ConfigError(f"cannot resume {out}: its config.yaml is another configuration "
                              "than this run's; run into a new folder or delete that one")
        finished = _finished_results(out, config)
        if finished is not None:  # e.g. a published run folder (results.json, no partial/)
            return finished
    write_atomic(config_path, config.to_yaml())
    federation = build_federation(config.dataset, config.data)
    task = build_task(config.model, federation)
    evaluator = FederationEvaluator(task, federation)
    reused = reused_runs(config, federation)
    not_applicable: dict[str, str] = {}  # method → why it can't run here
    if workers > 1:
        not_applicable = _train_in_workers(config, out, workers, progress, resume,
                                           skip=set(reused))
        resume = True  # what follows reads the workers' finished results
    # a reused run after the run it reuses (the results keep the configured order)
    jobs = sorted(((m, s) for m in config.methods for s in range(config.seeds)),
                  key=lambda job: job[0] in reused)
    outcomes: dict[str, list[dict[str, Any]]] = {m: [] for m in config.methods}
    privacy: dict[str, dict[str, Any]] = {}
    tuned: dict[str, dict[str, Any]] = {}  # method → tuning record
    configs: dict[str, RunConfig] = {}  # method → the configuration its seeds run with
    bar = tqdm(jobs, desc="methods", disable=not progress or workers > 1, unit="run")
    for method, seed in bar:
        bar.set_postfix_str(f"{method} seed {seed}")
        if method in not_applicable:
            continue
        partial = _partial_path(out, method, seed)
        try:
            if method not in configs:
                configs[method], tuned_record = _tuned_config(
                    method, federation, task, config, evaluator, out, resume)
                if tuned_record is not None:
                    tuned[method] = tuned_record
            if resume and partial.exists():
                record = json.loads(partial.read_text())
                outcomes[method].append(record)
                if record.get("privacy") is not None:
                    privacy[method] = record["privacy"]
                continue
            source, why = reused.get(method, (None, ""))
            done = [r for r in outcomes[source] if r["seed"] == seed] if source else []
            if done:
                record = _reuse_run(out, source, method, seed, done[0], why)
            else:
                record = _run_and_record(method, seed, federation, task, configs[method],
                                         evaluator, out, progress, resume)
        except MethodNotApplicableError as exc:
            not_applicable[method] = str(exc)
            continue
        if record.get("privacy") is not None:
            privacy[method] = record["privacy"]
        write_json(partial, record)
        _round_checkpoints(out, method, seed, configs[method]).remove()  # superseded
        outcomes[method].append(record)
    # what the loader read, kept and skipped (the split sizes), where it says
    data = {k: federation.meta[k] for k in ("source", "split_sizes") if k in federation.meta}
    results = {"config": config.model_dump(mode="json"), **({"data": data} if data else {}),
               "methods": {m: {**summarize_seeds(recs),
                               **({"tuning": tuned[m]} if m in tuned else {})}
                           for m, recs in outcomes.items() if recs},
               "not_applicable": not_applicable,
               **({"reused": reused_from} if (reused_from := {
                   m: {"from": recs[0]["reused_from"], "because": recs[0]["reused_because"]}
                   for m, recs in outcomes.items()
                   if recs and all("reused_from" in r for r in recs)}) else {})}
    for method in tuned:
        if method in privacy and not privacy[method]["epsilon_infinite"]:
            privacy[method] = with_unaccounted(privacy[method], TUNING_UNACCOUNTED)
            summary = results["methods"].get(method)
            if summary is not None and summary.get("epsilon") is not None:
                summary["epsilon_note"] = epsilon_note([privacy[method]])
    write_json(out / "results.json", results)
    write_json(out / "privacy.json", {"methods": privacy})
    state = out / "state"
    if state.is_dir() and not any(state.iterdir()):
        state.rmdir()
    return results


# -- methods × seeds in worker processes ---------------------------------------------------

def _train_in_workers(config: RunConfig, out: Path, workers: int, progress: bool,
                      resume: bool, skip: Collection[str] = ()) -> dict[str, str]:
    """Train every unfinished method × seed in ``workers`` processes
    (:func:`~regionfed.runtime.workers.run_in_workers`), leaving what the one-process loop
    leaves: ``partial/`` results and tuning records, round logs, checkpoints. Tuning runs
    first (one job per method), so that every seed of a method runs the chosen grid point.
    The methods in ``skip`` are left to the caller (:func:`reused_runs`). Returns method →
    why it does not apply here.

    Workers append round logs to ``metrics.jsonl`` side by side (one ``write`` per line:
    lines interleave, never mix); a resumed run's stale lines are dropped here, first."""
    threads = worker_threads(workers)
    payload = config.model_dump(mode="json")
    not_applicable: dict[str, str] = {}
    methods = list(dict.fromkeys(m for m, _ in _trainable_jobs(config)))
    if config.tuning.enabled:
        to_tune = [m for m in methods
                   if not (resume and _tuning_path(out, m).exists())]
        bar = tqdm(total=len(to_tune), desc=f"tuning ({workers} workers)", unit="method",
                   disable=not progress or not to_tune)
        for method, why in zip(to_tune, run_in_workers(
                _tune_job, [(payload, str(out), m, threads) for m in to_tune],
                min(workers, len(to_tune)) if to_tune else 1,
                on_done=lambda _: bar.update(1)), strict=True):
            if why is not None:
                not_applicable[method] = why
        bar.close()
    pending = [(m, s) for m, s in _trainable_jobs(config)
               if m not in not_applicable and m not in skip
               and not (resume and _partial_path(out, m, s).exists())]
    # an order that balances the workers by the methods' cost estimates: the pool does not
    # end on interp or meta alone on one core for minutes
    pending = [pending[i] for i in pool_order([get_method(m).cost for m, _ in pending],
                                              workers)]
    if resume:
        for method, seed in pending:
            _drop_stale_round_logs(out, method, seed, _saved_tuning(config, out, method)[0])
    rounds = tqdm(total=len(pending) * config.training.rounds, unit="round",
                  desc=f"{len(pending)} runs, {workers} workers",
                  disable=not progress or not pending)
    outcomes = run_in_workers(
        _train_job, [(payload, str(out), m, s, threads) for m, s in pending],
        min(workers, len(pending)) if pending else 1,
        on_tick=lambda _: rounds.update(1)) if pending else []
    rounds.close()
    for (method, _), why in zip(pending, outcomes, strict=True):
        if why is not None:
            not_applicable[method] = why
    return not_applicable


#: worker-process cache: the federation, task and evaluator of the run it serves
_WORKER_SETUP: dict[str, tuple[Federation, Task, FederationEvaluator]] = {}


def _worker_setup(config: RunConfig, threads: int
                  ) -> tuple[Federation, Task, FederationEvaluator]:
    torch.set_num_threads(threads)
    dumped = _as_json(config)
    key = json.dumps([config.dataset, dumped["data"], dumped["model"]])
    if key not in _WORKER_SETUP:
        _WORKER_SETUP.clear()
        federation = build_federation(config.dataset, config.data)
        task = build_task(config.model, federation)
        _WORKER_SETUP[key] = (federation, task, FederationEvaluator(task, federation))
    return _WORKER_SETUP[key]


def _tune_job(payload: dict[str, Any], out: str, method: str, threads: int) -> str | None:
    """Worker: fair tuning of one method (its record in ``partial/``); why it does not apply
    here, or None."""
    config = build_config(payload)
    try:
        federation, task, evaluator = _worker_setup(config, threads)
        _tuned_config(method, federation, task, config, evaluator, Path(out), resume=False)
    except MethodNotApplicableError as exc:
        return str(exc)
    return None


def _train_job(payload: dict[str, Any], out: str, method: str, seed: int, threads: int,
               ticks: Any) -> str | None:
    """Worker: one method × seed, recorded in ``partial/`` as the one-process loop records
    it; a tick on ``ticks`` per round. Why it does not apply here, or None."""
    config = build_config(payload)
    federation, task, evaluator = _worker_setup(config, threads)
    folder = Path(out)
    try:
        run_config, _ = _tuned_config(method, federation, task, config, evaluator, folder,
                                      resume=True)
        record = _run_and_record(method, seed, federation, task, run_config, evaluator,
                                 folder, progress=False, tick=lambda: ticks.put(1))
    except MethodNotApplicableError as exc:
        return str(exc)
    write_json(_partial_path(folder, method, seed), record)
    _round_checkpoints(folder, method, seed, run_config).remove()  # superseded
    return None


#: what fair tuning under DP leaves uncovered: the grid point is picked by un-noised
#: validation scores of the tuning run
TUNING_UNACCOUNTED = ("hyper-parameters chosen by fair tuning on un-noised validation "
                      "Overall (tuning seed)")


def with_unaccounted(record: dict[str, Any], what: str) -> dict[str, Any]:
    """A ``privacy.json`` record with one more choice ε does not cover."""
    listed = list(record.get("unaccounted", []))
    if what in listed:
        return record
    return {**record, "unaccounted": [*listed, what],
            "protects": with_uncovered(record["protects"], what)}


def epsilon_note(privacy: list[dict[str, Any]]) -> str | None:
    """What a table must say next to ε: deterministic (test) noise, or choices ε does not
    cover; ``None`` when ε means what it says."""
    notes = []
    if any(str(p.get("noise", "")).startswith(DETERMINISTIC_NOISE) for p in privacy):
        notes.append(DETERMINISTIC_NOISE)
    if any(p.get("unaccounted") for p in privacy):
        notes.append("does not cover " + "; ".join(dict.fromkeys(
            c for p in privacy for c in p.get("unaccounted", []))))
    return ", ".join(notes) or None


def _as_json(config: RunConfig) -> Any:
    """A configuration as its ``results.json`` / YAML form (tuples as lists, …)."""
    return json.loads(json.dumps(config.model_dump(mode="json")))


def _finished_results(out: Path, config: RunConfig) -> dict[str, Any] | None:
    """``out/results.json`` if it holds every method × seed of exactly ``config`` (nothing
    left to run), else ``None``; an unreadable file counts as unfinished (it is rewritten)."""
    try:
        results = json.loads((out / "results.json").read_text())
        if results["config"] != _as_json(config):
            return None
        methods, skipped = results["methods"], results["not_applicable"]
        done = all(m in skipped or len(methods[m]["seeds"]) == config.seeds
                   for m in config.methods)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return results if done else None


def _tuned_config(method: str, federation: Federation, task: Task, config: RunConfig,
                  evaluator: FederationEvaluator, out: Path, resume: bool
                  ) -> tuple[RunConfig, dict[str, Any] | None]:
    """The configuration ``method`` runs with: ``config``, or with tuning on, the chosen grid
    point (searched once per method; a resumed run reuses its saved search)."""
    if not config.tuning.enabled or get_method(method).kind == "reference":
        return config, None
    if resume and (saved := _saved_tuning(config, out, method))[1] is not None:
        return saved
    tuned_config, record = tune_method(method, federation, task, config, evaluator)
    write_json(_tuning_path(out, method), record)
    return tuned_config, record


def _tuning_path(out: Path, method: str) -> Path:
    return out / "partial" / f"tuning__{method}.json"


def _saved_tuning(config: RunConfig, out: Path, method: str
                  ) -> tuple[RunConfig, dict[str, Any] | None]:
    """``config`` with ``method``'s saved tuning choice applied and the saved record (tuning
    on and searched), else ``(config, None)``."""
    path = _tuning_path(out, method)
    if not config.tuning.enabled or not path.exists():
        return config, None
    record = json.loads(path.read_text())
    return with_overrides(config, record["chosen"]), record


def _round_checkpoints(out: Path, method: str, seed: int, config: RunConfig
                       ) -> RoundCheckpoints:
    return RoundCheckpoints(out / "state" / f"{method}-seed{seed}.safetensors",
                            run_identity(method, seed, config.to_yaml()),
                            config.training.checkpoint_every)


def _checkpoints_of(out: Path, method: str, seed: int, config: RunConfig
                    ) -> RoundCheckpoints | None:
    """The round checkpoints of an in-process federated method × seed (None: not kept)."""
    if (get_method(method).kind == "federated" and config.runtime == "inprocess"
            and config.training.checkpoint_every > 0):
        return _round_checkpoints(out, method, seed, config)
    return None


def _drop_stale_round_logs(out: Path, method: str, seed: int, config: RunConfig) -> None:
    """Before resuming ``method`` × ``seed`` (run with ``config``: tuned, if tuning is on):
    keep its round logs up to its round checkpoint, drop the later ones."""
    checkpoints = _checkpoints_of(out, method, seed, config)
    saved = checkpoints.saved_round() if checkpoints is not None else None
    _keep_metric_lines(out, method, seed, saved or 0)


def _keep_metric_lines(out: Path, method: str, seed: int, through: int) -> None:
    """Drop the round logs of ``method`` × ``seed`` after round ``through`` from
    ``metrics.jsonl`` (a resumed run logs those rounds again)."""
    path = out / "metrics.jsonl"
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # the half-written last line of a killed run
        if entry.get("method") != method or entry.get("seed") != seed or \
                entry.get("round", 0) <= through:
            kept.append(line)
    write_atomic(path, "".join(f"{line}\n" for line in kept))


def _run_and_record(method: str, seed: int, federation: Federation, task: Task,
                    config: RunConfig, evaluator: FederationEvaluator, out: Path,
                    progress: bool, resume: bool = False,
                    tick: Callable[[], None] | None = None) -> dict[str, Any]:
    """One method × seed: train (continuing from its round checkpoint when resuming; its
    stale round logs dropped first when ``resume``), append its round logs (``tick()`` after
    each), save its final checkpoint; the record."""
    checkpoints = _checkpoints_of(out, method, seed, config)
    if resume:
        _drop_stale_round_logs(out, method, seed, config)
    rounds = tqdm(total=config.training.rounds, desc=f"  {method}", leave=False,
                  disable=not progress or get_method(method).kind == "reference",
                  unit="round")

    def on_round(log: dict[str, Any]) -> None:
        append_jsonl(out / "metrics.jsonl", {"method": method, "seed": seed, **log})
        rounds.update(1)
        if tick is not None:
            tick()

    try:
        outcome, run = run_method(method, federation, task, config, seed, evaluator,
                                  on_round, checkpoints)
    finally:
        rounds.close()
    if run is not None:
        model = set_flat(task.build_model(seed), run.final_params)
        # parameters by name (tied weights once): exactly what the flat vector holds
        save_checkpoint(out / "checkpoints" / f"{method}-seed{seed}.safetensors",
                        dict(model.named_parameters()))
        if run.regional_params:  # flat parameter vectors, by region
            save_checkpoint(out / "checkpoints" / f"{method}-seed{seed}.regions.safetensors",
                            run.regional_params)
    return {"seed": seed, "seconds": round(outcome.seconds, 3),
            "epsilon": outcome.epsilon, "privacy": outcome.privacy,
            # a task without a metric (an image task has no NER) records None for it
            **{k: outcome.test.get(k) for k in SUMMARY_KEYS},
            "per_region": outcome.test["per_region"],
            "per_client": outcome.test["per_client"],
            **({"user_personalization": outcome.test["user_personalization"]}
               if "user_personalization" in outcome.test else {}),
            **({"diagnostics": outcome.test["diagnostics"]}
               if "diagnostics" in outcome.test else {}),
            "per_region_metrics": outcome.test["per_region_metrics"]}


def summarize_seeds(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean over seeds of every summary metric (plus ``*_std`` when there are ≥ 2 seeds)."""
    summary: dict[str, Any] = {}
    for key in SUMMARY_KEYS:
        if any(r.get(key) is None for r in records):
            summary[key] = None
            continue
        mean, std = metrics.mean_std([r[key] for r in records])
        summary[key] = mean
        if len(records) > 1:
            summary[f"{key}_std"] = std
    eps = [r["epsilon"] for r in records]
    summary["epsilon"] = None if any(e is None for e in eps) else max(eps)
    if summary["epsilon"] is not None and (note := epsilon_note(
            [r.get("privacy") or {} for r in records])):
        summary["epsilon_note"] = note
    regions = records[0]["per_region"].keys()
    summary["per_region"] = {r: metrics.mean_std([rec["per_region"][r] for rec in records])[0]
                             for r in regions}
    summary["seconds"] = metrics.mean_std([r["seconds"] for r in records])[0]
    if all("user_personalization" in r for r in records):
        keys = [k for k, v in records[0]["user_personalization"].items()
                if isinstance(v, float)]
        summary["user_personalization"] = {
            k: metrics.mean_std([r["user_personalization"][k] for r in records])[0]
            for k in keys}
    summary["seeds"] = records
    return summary
