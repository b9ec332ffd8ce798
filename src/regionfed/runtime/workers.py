"""Independent jobs in a pool of spawned worker processes, each with its share of the cores.

On a small CPU one training process is mostly small sequential kernels that a second torch
thread barely speeds up, while a second process doubles the throughput (docs/studies.md,
docs/performance.md). ``regionfed sweep`` runs a study's variants this way and
``regionfed run`` its methods × seeds.

Workers are *spawned* (a fresh interpreter each: torch's threads do not survive a fork) and
reused for the next job, so a module-level cache in the worker (e.g. the federation) is built
once per worker, not once per job.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from contextlib import nullcontext
from multiprocessing import Manager, get_context
from typing import Any

from regionfed.runtime.threads import free_threads, usable_cores, user_threads


def auto_workers(jobs: int) -> int:
    """Workers for ``jobs`` independent jobs: one per core other work leaves free
    (:func:`~regionfed.runtime.threads.free_threads`), at most one per job; 1 when the user
    fixed the thread count with ``OMP_NUM_THREADS`` (they asked for that many threads, not
    for several processes)."""
    if user_threads() is not None:
        return 1
    return max(1, min(free_threads()[0], jobs))


def worker_threads(workers: int, cores: int | None = None) -> int:
    """torch threads per worker: the cores divided among the workers, at least 1."""
    cores = len(usable_cores()) if cores is None else cores
    return max(1, cores // workers)


def pool_makespan(order: Sequence[int], costs: Sequence[float], workers: int) -> float:
    """When the last of ``workers`` finishes if each, once free, takes the next job of
    ``order`` (job ``i`` lasting ``costs[i]``): the pool of :func:`run_in_workers`."""
    free = [(0.0, w) for w in range(workers)]
    end = 0.0
    for job in order:
        start, worker = heapq.heappop(free)
        end = max(end, start + costs[job])
        heapq.heappush(free, (start + costs[job], worker))
    return end


def pool_order(costs: Sequence[float], workers: int, max_jobs: int = 40) -> list[int]:
    """An order of the jobs for a pool of ``workers`` that ends as early as the cost
    estimates allow: longest-processing-time first (Graham 1969), then any swap of two jobs
    that shortens the estimated makespan (:func:`pool_makespan`) while one does.

    On ``make run``'s ten runs (measured seconds 104, 89, 63, 63, 49, 42, 42, 38, 37, 1 on
    two workers) longest-first ends at 280 s, the swaps at 264 s (half the sum: 264 s).
    Beyond ``max_jobs`` jobs, longest-first only: the swaps cost O(n³) (0.08 s for 40 jobs)
    and longest-first is already within ~0.1 % of half the sum there (random costs)."""
    order = sorted(range(len(costs)), key=lambda i: -costs[i])
    if workers <= 1 or len(order) <= workers or len(order) > max_jobs:
        return order
    best = pool_makespan(order, costs, workers)
    improved = True
    while improved:
        improved = False
        for i, j in itertools.combinations(range(len(order)), 2):
            order[i], order[j] = order[j], order[i]
            span = pool_makespan(order, costs, workers)
            if span < best - 1e-9:
                best, improved = span, True
            else:
                order[i], order[j] = order[j], order[i]
    return order


def run_in_workers(function: Callable[..., Any], jobs: Sequence[tuple[Any, ...]], workers: int,
                   *, on_done: Callable[[int], None] | None = None,
                   on_tick: Callable[[Any], None] | None = None) -> list[Any]:
    """``[function(*job) for job in jobs]`` in ``workers`` spawned processes; results in job
    order.

    ``on_done(i)`` is called in this process as job ``i`` finishes. With ``on_tick``, every
    job gets one more argument, a queue: whatever a worker puts there reaches ``on_tick`` in
    this process (e.g. one item per training round, for a progress bar). The first failure
    cancels the jobs not yet started and is raised once the running ones stop."""
    context = get_context("spawn")
    with Manager() if on_tick is not None else nullcontext() as manager:
        queue = manager.Queue() if on_tick is not None else None
        drain = None
        if queue is not None:
            drain = threading.Thread(target=_drain, args=(queue, on_tick), daemon=True)
            drain.start()
        try:
            with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
                futures = [pool.submit(function, *job, *((queue,) if queue else ()))
                           for job in jobs]
                index = {future: i for i, future in enumerate(futures)}
                pending = set(futures)
                while pending:
                    done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                    for future in done:
                        if future.exception() is None and on_done is not None:
                            on_done(index[future])
                    failed = next((f for f in done if f.exception() is not None), None)
                    if failed is not None:
                        for future in pending:
                            future.cancel()
                        raise failed.exception()
        finally:
            if queue is not None:
                queue.put(_STOP)
                drain.join(timeout=5)
    return [future.result() for future in futures]


_STOP = "__regionfed_workers_stop__"


def _drain(queue: Any, on_tick: Callable[[Any], None]) -> None:
    while True:
        try:
            item = queue.get()
        except (EOFError, OSError):  # the manager went away
            return
        if item == _STOP:
            return
        on_tick(item)
