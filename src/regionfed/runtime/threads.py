"""How many torch threads a run trains with: the cores other work leaves free.

torch starts one thread per core. When another process already keeps those cores busy, its
threads wait on each other at every parallel region: measured on 2 cores beside a running
sweep, a ``local`` round took 60 s with 2 threads and 16 s with 1 (same numbers). So a run
measures, before it starts, how busy its usable cores are (:func:`busy_cores`: two reads of
``/proc/stat`` per core) and keeps ``round(usable − busy)`` threads, at least one.
``OMP_NUM_THREADS`` set by the user wins; sweep workers get their share from the sweep.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

#: where Linux keeps the per-core time counters
PROC_STAT = Path("/proc/stat")


def usable_cores() -> list[int]:
    """The CPU cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return list(range(os.cpu_count() or 1))


def core_times(text: str) -> dict[int, tuple[int, int]]:
    """Per core of a ``/proc/stat`` text: (busy, total) jiffies; idle and iowait are not
    busy."""
    out = {}
    for line in text.splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        ticks = [int(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal
        total = sum(ticks)
        out[int(name[3:])] = (total - ticks[3] - ticks[4], total)
    return out


def busy_cores(cores: list[int], interval: float = 0.1,
               read: Callable[[], str] | None = None) -> float | None:
    """How many of ``cores`` other processes kept busy over ``interval`` seconds (this one
    sleeps meanwhile): Σ over the cores of Δbusy / Δtotal. None where the counters cannot
    be read (not Linux)."""
    read = read or PROC_STAT.read_text
    try:
        before = core_times(read())
        time.sleep(interval)
        after = core_times(read())
    except (OSError, ValueError):
        return None
    busy = 0.0
    for core in cores:
        if core not in before or core not in after:
            return None
        spent = after[core][1] - before[core][1]
        if spent > 0:
            busy += (after[core][0] - before[core][0]) / spent
    return busy


def user_threads(environ: Mapping[str, str] | None = None) -> int | None:
    """The thread count the user set with ``OMP_NUM_THREADS`` (a positive integer), else
    None."""
    value = (os.environ if environ is None else environ).get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def choose_threads(cores: list[int] | None = None, busy: float | None = None,
                   environ: Mapping[str, str] | None = None) -> tuple[int, str]:
    """(torch threads, why): ``OMP_NUM_THREADS`` if set, else the usable cores minus the
    busy ones, rounded, at least 1 (all usable cores when busyness cannot be measured)."""
    if (n := user_threads(environ)) is not None:
        return n, f"{n} (OMP_NUM_THREADS)"
    cores = usable_cores() if cores is None else cores
    if busy is None:
        return len(cores), f"{len(cores)} (every usable core; load not measurable here)"
    n = max(1, min(len(cores), round(len(cores) - busy)))
    return n, f"{n} of {len(cores)} usable cores ({busy:.1f} busy with other work)"


def free_threads() -> tuple[int, str]:
    """:func:`choose_threads` on a fresh measurement of the usable cores (none is taken when
    ``OMP_NUM_THREADS`` decides)."""
    cores = usable_cores()
    busy = None if user_threads() is not None else busy_cores(cores)
    return choose_threads(cores, busy)


def use_free_cores() -> tuple[int, str]:
    """Set torch's thread count by :func:`free_threads`."""
    import torch

    threads, why = free_threads()
    torch.set_num_threads(threads)
    return threads, why
