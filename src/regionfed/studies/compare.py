"""``regionfed compare``: every method (or a subset) on one configuration in the paper's
Table-1 layout, as configured and optionally also without DP (``both``).

Output folder: ``compare-config.yaml`` and ``command.txt`` (what started it), one run
folder per privacy setting (``no-dp/``, ``dp/``: ordinary :func:`run_experiment` folders,
resumable), and ``results.md`` (:func:`~regionfed.report.comparison_markdown`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from regionfed.config import RunConfig, build_config, load_config
from regionfed.errors import ConfigError
from regionfed.experiment import removed_if_start_fails, run_experiment, with_overrides
from regionfed.io import write_atomic
from regionfed.report import comparison_markdown
from regionfed.studies.runner import hardware


@dataclass(frozen=True)
class Comparison:
    """A finished comparison: its Table-1 markdown (also in ``out/results.md``) and the run
    folder of each privacy setting."""

    markdown: str
    folders: list[Path]


def privacy_settings(config: RunConfig, both: bool) -> list[tuple[str, RunConfig]]:
    """(title, configuration) of each run: the configured one, and with ``both`` the same
    without DP first (which needs DP configured)."""
    if not both:
        return [("With DP" if config.dp.mode != "off" else "Without DP", config)]
    if config.dp.mode == "off" or config.dp.sigma <= 0:
        raise ConfigError("--privacy both needs DP settings (e.g. --dp-sigma 1 --dp-clip 1)")
    return [("Without DP", with_overrides(config, {"dp.mode": "off"})), ("With DP", config)]


def run_compare(config: RunConfig, out: Path, *, both: bool, command: str,
                progress: bool = True, jobs: int | None = 1) -> Comparison:
    """Start a comparison in the new folder ``out`` (removed again if it fails before
    anything resumable is done)."""
    privacy_settings(config, both)  # refused before any folder exists
    with removed_if_start_fails(out):
        out.mkdir(parents=True)
        write_atomic(out / "compare-config.yaml", config.to_yaml())
        write_atomic(out / "command.txt", command + "\n")
        return _run(config, out, both, command, progress, resume=False, jobs=jobs)


def resume_compare(out: Path, *, command: str, progress: bool = True,
                   jobs: int | None = 1) -> Comparison:
    """Finish the comparison in ``out`` with the configuration and privacy settings it was
    started with; its command is recorded as the first one plus ``command``."""
    config = build_config(load_config(out / "compare-config.yaml"))
    first = out / "command.txt"
    if first.exists():  # the command that started it, then how it was finished
        command = f"{first.read_text().strip()}\n# resumed with: {command}"
    both = (out / "no-dp").exists() and config.dp.mode != "off"
    return _run(config, out, both, command, progress, resume=True, jobs=jobs)


def _run(config: RunConfig, out: Path, both: bool, command: str, progress: bool,
         resume: bool, jobs: int | None) -> Comparison:
    settings = privacy_settings(config, both)
    start = time.perf_counter()
    done, folders = [], []
    for title, setting in settings:
        folder = out / ("no-dp" if setting.dp.mode == "off" else "dp")
        folders.append(folder)
        if len(settings) > 1 and progress:
            print(f"== {title} → {folder}", flush=True)
        done.append((title, run_experiment(setting, folder, progress=progress, resume=resume,
                                           jobs=jobs)))
    markdown = comparison_markdown(done, command=command,
                                   seconds=time.perf_counter() - start, hardware=hardware())
    write_atomic(out / "results.md", markdown)
    return Comparison(markdown, folders)
