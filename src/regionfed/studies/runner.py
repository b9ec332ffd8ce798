"""``regionfed sweep STUDY``: run every variant of a study (methods × seeds each) into
``<out>/<variant>/`` with the ordinary experiment runner, then write ``<out>/<study>.csv``,
``<out>/<study>.png`` and ``<out>/study.json`` (command, hardware, wall time, rows).

Resumable at every level: a finished variant is read back, an interrupted one continues
(``run_experiment(resume=True)``: finished method × seed results are kept and the running one
continues from its round checkpoint).

Variants are independent runs in their own folders, so ``jobs > 1`` trains that many of them
at once in worker processes, each with ``cores // jobs`` torch threads: one process's
training is mostly small sequential kernels that a second thread barely speeds up, while a
second process doubles the throughput on 2 cores.
"""

from __future__ import annotations

import csv
import io
import os
import platform
import re
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from regionfed import metrics
from regionfed.config import RunConfig, apply_set_overrides, build_config, set_dotted
from regionfed.errors import ConfigError
from regionfed.io import write_atomic, write_json
from regionfed.runtime.threads import usable_cores
from regionfed.runtime.workers import run_in_workers, worker_threads
from regionfed.studies.registry import Study, Variant

#: the CSV columns, in order
COLUMNS = ("study", "variant", "method", "seeds", "overall", "overall_std", "intent", "spell",
           "ner_f1", "rrs", "worst_region", "region_std", "epsilon", "seconds", "run")


def slug(label: str) -> str:
    """A folder name for a variant label (``α_D=0.1`` → ``a_D-0.1``)."""
    text = label.replace("α", "a").replace("σ", "sigma").replace("τ", "tau") \
        .replace("μ", "mu").replace("ρ", "rho").replace("=", "-").replace("%", "pct") \
        .replace("+", "plus")
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "variant"


def variant_config(study: Study, variant: Variant, *, full: bool, seeds: int | None,
                   set_items: list[str] | None = None) -> RunConfig:
    """The run configuration of one variant: study size ← variant ← ``--set KEY=VALUE``."""
    data: dict[str, Any] = {"name": f"{study.name}-{slug(variant.label)}",
                            "methods": list(variant.methods or study.methods),
                            "seeds": seeds or (study.full_seeds if full else study.seeds)}
    for key, value in {**study.size(full), **variant.overrides}.items():
        set_dotted(data, key, value)
    apply_set_overrides(data, set_items or [])
    return build_config(data)


def variant_rows(study: Study, variant: Variant, results: dict[str, Any], run: Path
                 ) -> list[dict[str, Any]]:
    """One CSV row per method of a finished variant."""
    rows = []
    for method, summary in results["methods"].items():
        overall, std = summary.get("overall"), summary.get("overall_std")
        if variant.metric == "personalized":
            per_seed = [s["user_personalization"]["overall_after"]
                        for s in summary["seeds"] if "user_personalization" in s]
            if len(per_seed) != len(summary["seeds"]):
                raise ConfigError(f"{study.name} / {variant.label}: {method} has no "
                                  "user-level personalization results")
            overall, std = metrics.mean_std(per_seed)
            std = std if len(per_seed) > 1 else None
        rows.append({
            "study": study.name, "variant": variant.label, "method": method,
            "seeds": len(summary["seeds"]), "overall": overall, "overall_std": std,
            **{k: summary.get(k) for k in ("intent", "spell", "ner_f1", "rrs",
                                           "worst_region", "region_std", "epsilon",
                                           "seconds")},
            **({"epsilon_note": summary["epsilon_note"]} if "epsilon_note" in summary
               else {}),
            "run": str(run)})
    return rows


def default_jobs(study: Study) -> int:
    """One worker per usable core, never more than the study has variants."""
    return max(1, min(len(usable_cores()), len(study.variants)))


def _run_variant(config: RunConfig, folder: Path, progress: bool,
                 threads: int | None) -> dict[str, Any]:
    """Run (or resume) one variant; in a worker process, with ``threads`` torch threads."""
    from regionfed.experiment import run_experiment

    return run_experiment(config, folder, progress=progress,
                          resume=(folder / "config.yaml").exists(), threads=threads)


def run_study(study: Study, out: Path, *, full: bool = False, seeds: int | None = None,
              set_items: list[str] | None = None, progress: bool = True,
              command: str = "", jobs: int = 1) -> dict[str, Any]:
    """Run (or resume) every variant of ``study`` under ``out``, ``jobs`` variants at a time;
    returns ``study.json``."""
    if jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {jobs}")
    configs = [(v, variant_config(study, v, full=full, seeds=seeds, set_items=set_items))
               for v in study.variants]  # every variant validated before anything runs
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    jobs = min(jobs, len(configs))
    if jobs == 1:
        results = []
        bar = tqdm(configs, desc=study.name, unit="variant", disable=not progress)
        for variant, config in bar:
            bar.set_postfix_str(variant.label)
            results.append(_run_variant(config, out / slug(variant.label), progress, None))
    else:
        results = _run_in_workers(study, configs, out, jobs, progress)
    rows: list[dict[str, Any]] = []
    for (variant, _), result in zip(configs, results, strict=True):
        rows.extend(variant_rows(study, variant, result, out / slug(variant.label)))
    record = {"study": study.name, "title": study.title, "paper": study.paper,
              "question": study.question, "full": full, "command": command,
              "hardware": hardware(), "jobs": jobs,
              "wall_seconds": round(time.perf_counter() - start, 1),
              "run_seconds": run_seconds(rows),
              "variants": [v.label for v in study.variants], "rows": rows}
    write_study(record, out)
    return record


def run_seconds(rows: list[dict[str, Any]]) -> float:
    """The runs' own time, whichever invocation trained them (resume-proof)."""
    return round(sum((r["seconds"] or 0.0) * r["seeds"] for r in rows), 1)


def write_study(record: dict[str, Any], out: Path) -> None:
    """A study folder's summary: ``study.json``, the rows' CSV and their plot."""
    write_json(out / "study.json", record)
    write_atomic(out / f"{record['study']}.csv", rows_csv(record["rows"]))
    plot_study(record, out / f"{record['study']}.png")


def _run_in_workers(study: Study, configs: list[tuple[Variant, RunConfig]], out: Path,
                    jobs: int, progress: bool) -> list[dict[str, Any]]:
    """Every variant in a pool of ``jobs`` worker processes
    (:func:`~regionfed.runtime.workers.run_in_workers`); results in variant order."""
    threads = worker_threads(jobs)
    bar = tqdm(total=len(configs), desc=f"{study.name} ({jobs} workers)", unit="variant",
               disable=not progress)
    results = run_in_workers(
        _run_variant, [(config, out / slug(variant.label), False, threads)
                       for variant, config in configs],
        jobs, on_done=lambda _: bar.update(1))
    bar.close()
    return results


def rows_csv(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def hardware() -> str:
    return (f"{platform.machine()} CPU × {os.cpu_count()}, Python "
            f"{platform.python_version()}, {platform.system()}")


def plot_study(record: dict[str, Any], path: Path) -> None:
    """Overall (mean ± std over seeds) per variant, one line per method."""
    from regionfed.report_plots import pyplot

    plt = pyplot()
    variants = record["variants"]
    fig, ax = plt.subplots(figsize=(max(7, 0.9 * len(variants) + 4), 4.5))
    methods = list(dict.fromkeys(r["method"] for r in record["rows"]))
    for method in methods:
        points = {r["variant"]: r for r in record["rows"] if r["method"] == method}
        xs = [i for i, v in enumerate(variants) if v in points]
        ax.errorbar(xs, [100 * points[variants[i]]["overall"] for i in xs],
                    yerr=[100 * (points[variants[i]]["overall_std"] or 0.0) for i in xs],
                    marker="o", capsize=3, label=method)
    ax.set_xticks(range(len(variants)), variants, rotation=30 if len(variants) > 5 else 0,
                  ha="right" if len(variants) > 5 else "center", fontsize=8)
    ax.set_ylabel("test Overall (%)")
    ax.set_title(f"{record['title']} ({record['paper']})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
