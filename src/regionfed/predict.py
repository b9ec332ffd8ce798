"""Predictions of a finished run for typed queries (paper Table 3): intent, corrected query
and NER tags under one region's final model, next to the global model's.

The run folder gives everything: ``config.yaml`` rebuilds the task (word list, tokenizer,
label sets — nothing is downloaded), ``checkpoints/<method>-seed<k>.safetensors`` holds the
final global model and ``….regions.safetensors`` each region's model (region-personalized
methods; for the others every region is served by the global model, and the answer says so).

    from regionfed.predict import predict_queries
    answers = predict_queries("runs/default", "region_01", ["cheap runing shoes"])
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file

from regionfed.algorithms.registry import get_method
from regionfed.config import RunConfig, build_config, load_config
from regionfed.data.queries import INTENTS, MAX_TOKENS, QueryDataset
from regionfed.data.registry import build_federation
from regionfed.errors import ConfigError, DataError
from regionfed.models.query_task import QueryUnderstanding
from regionfed.models.registry import build_task
from regionfed.runtime.params import get_flat, set_flat


@dataclass
class QueryAnswer:
    """One query under one model."""

    query: str
    intent: str
    corrected: str
    tags: list[tuple[str, str]]  # (word, BIO tag)


@dataclass
class RunPredictions:
    method: str
    seed: int
    region: str
    #: False when the method has one global model (the region's answers are the global ones)
    regional_model: bool
    regional: list[QueryAnswer]
    global_: list[QueryAnswer]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["global"] = data.pop("global_")
        return data


def query_dataset(queries: list[str]) -> QueryDataset:
    """Unlabelled queries as a dataset (lower-cased whitespace words, at most MAX_TOKENS)."""
    tokens = [q.lower().split()[:MAX_TOKENS] for q in queries]
    empty = [q for q, t in zip(queries, tokens, strict=True) if not t]
    if empty:
        raise DataError(f"empty query {empty[0]!r}: give at least one word")
    return QueryDataset(tokens=tokens, targets=[list(t) for t in tokens],
                        ner=[["O"] * len(t) for t in tokens],
                        intent=np.zeros(len(tokens), dtype=np.int64))


def default_method(run: Path) -> str:
    """The trained method to answer with: the best by Overall among those with regional
    models, else the best trained one."""
    results_path = run / "results.json"
    if not results_path.exists():
        raise ConfigError(f"{run} has no results.json: is it a finished run?")
    methods = json.loads(results_path.read_text())["methods"]
    trained = {m: r for m, r in methods.items()
               if (run / "checkpoints" / f"{m}-seed0.safetensors").exists()}
    if not trained:
        raise ConfigError(f"{run} has no model checkpoints (only reference methods ran)")
    regional = {m: r for m, r in trained.items()
                if (run / "checkpoints" / f"{m}-seed0.regions.safetensors").exists()}
    pool = regional or trained
    return max(pool, key=lambda m: pool[m].get("overall") or 0.0)


def load_global_params(task: Any, path: Path, seed: int) -> torch.Tensor:
    """The flat parameter vector of a final global-model checkpoint (named parameters)."""
    if not path.exists():
        raise ConfigError(f"checkpoint not found: {path}")
    try:
        saved = load_file(str(path))
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same problem
        raise DataError(f"checkpoint {path} is unreadable ({type(exc).__name__})") from None
    model = task.build_model(seed)
    named = dict(model.named_parameters())
    if set(saved) != set(named) or any(saved[k].shape != p.shape for k, p in named.items()):
        raise DataError(f"checkpoint {path} does not fit this run's model")
    with torch.no_grad():
        for name, param in named.items():
            param.copy_(saved[name])
    return get_flat(model)


def predict_queries(run_dir: str | Path, region: str, queries: list[str],
                    method: str | None = None, seed: int = 0) -> RunPredictions:
    """Answers of ``region``'s final model and of the global model for ``queries``."""
    run = Path(run_dir)
    if not (run / "config.yaml").exists():
        raise ConfigError(f"not a run folder (no config.yaml): {run}")
    config: RunConfig = build_config(load_config(run / "config.yaml"))
    method = method or default_method(run)
    if get_method(method).kind == "reference":
        raise ConfigError(f"{method} is a reference without a model; pick a trained method")
    federation = build_federation(config.dataset, config.data)
    if region not in federation.regions:
        raise ConfigError(f"unknown region {region!r}; this run's regions: "
                          f"{', '.join(federation.regions)}")
    task = build_task(config.model, federation)
    if not isinstance(task, QueryUnderstanding):
        raise ConfigError(f"predict answers retail queries; this run trained "
                          f"{type(task).__name__} ({config.dataset})")
    stem = run / "checkpoints" / f"{method}-seed{seed}"
    global_params = load_global_params(task, stem.with_suffix(".safetensors"), seed)
    regional_path = stem.with_suffix(".regions.safetensors")
    regional_params = global_params
    if regional_path.exists():
        regions = load_file(str(regional_path))
        if region in regions:
            regional_params = regions[region]
    dataset = query_dataset(queries)
    model = task.build_model(seed)

    def answers(params: torch.Tensor) -> list[QueryAnswer]:
        predictions = task.predict(set_flat(model, params), dataset)
        return [QueryAnswer(query, INTENTS[int(intent)] if 0 <= int(intent) < len(INTENTS)
                            else "(unparseable)", " ".join(spell),
                            list(zip(words, tags, strict=False)))
                for query, intent, spell, tags, words in zip(
                    queries, predictions.intent, predictions.spell, predictions.ner,
                    dataset.tokens, strict=True)]

    return RunPredictions(method, seed, region, regional_params is not global_params,
                          answers(regional_params), answers(global_params))


def format_predictions(result: RunPredictions) -> str:
    """Table 3 layout: per query, the regional and the global model's answers."""
    lines = [f"{result.method} (seed {result.seed}), region {result.region}"
             + ("" if result.regional_model else
                f" — {result.method} has one global model, so both rows agree")]
    for mine, shared in zip(result.regional, result.global_, strict=True):
        lines.append(f'\nquery: "{mine.query}"')
        for label, answer in (("regional", mine), ("global", shared)):
            tags = " ".join(f"{w}/{t}" for w, t in answer.tags)
            lines.append(f"  {label:<8} intent={answer.intent}  corrected=\"{answer.corrected}\""
                         f"  tags={tags}")
    return "\n".join(lines)
