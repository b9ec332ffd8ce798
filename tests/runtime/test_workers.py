"""The worker pool behind ``regionfed run --jobs`` and ``regionfed sweep --jobs``: results in
job order, failures raised, ticks forwarded, and the share of cores each worker gets."""

import os

import pytest

from regionfed.runtime.workers import (
    auto_workers,
    pool_makespan,
    pool_order,
    run_in_workers,
    worker_threads,
)


def square_and_pid(x):
    return x * x, os.getpid()


def ticking(x, ticks):
    for _ in range(x):
        ticks.put(x)
    return x


def failing(x):
    if x == 2:
        raise ValueError("job 2 failed")
    return x


def test_results_come_back_in_job_order_from_other_processes():
    done = []
    results = run_in_workers(square_and_pid, [(x,) for x in range(5)], 2, on_done=done.append)
    assert [r for r, _ in results] == [0, 1, 4, 9, 16]
    assert {pid for _, pid in results} - {os.getpid()}  # not computed here
    assert os.getpid() not in {pid for _, pid in results}
    assert sorted(done) == list(range(5))


def test_every_tick_a_worker_sends_reaches_this_process():
    ticks = []
    assert run_in_workers(ticking, [(1,), (2,), (3,)], 2, on_tick=ticks.append) == [1, 2, 3]
    assert sorted(ticks) == [1, 2, 2, 3, 3, 3]


def test_a_failing_job_raises_its_own_error():
    with pytest.raises(ValueError, match="job 2 failed"):
        run_in_workers(failing, [(x,) for x in range(4)], 2)


def test_the_cores_are_divided_among_the_workers():
    assert worker_threads(2, cores=2) == 1
    assert worker_threads(3, cores=2) == 1
    assert worker_threads(1, cores=4) == 4
    assert worker_threads(2, cores=5) == 2


def test_a_user_thread_count_means_one_process(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert auto_workers(10) == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert 1 <= auto_workers(10) <= len(os.sched_getaffinity(0))
    assert auto_workers(1) == 1


def test_pool_makespan_follows_the_first_free_worker():
    # two workers: 3 | 2, the free one (t=2) takes 2 → 4, then (t=3) takes 1 → 4
    assert pool_makespan([0, 1, 2, 3], [3.0, 2.0, 2.0, 1.0], 2) == 4.0
    assert pool_makespan([0, 1], [3.0, 2.0], 1) == 5.0


def test_pool_order_beats_longest_first_where_it_can():
    """3, 3, 2, 2, 2 on two workers: longest-first ends at 7 (3+2+2 | 3+2), the balanced
    order at 6 (3+3 | 2+2+2), the best there is; every job exactly once."""
    costs = [3.0, 3.0, 2.0, 2.0, 2.0]
    assert pool_makespan([0, 1, 2, 3, 4], costs, 2) == 7.0
    order = pool_order(costs, 2)
    assert sorted(order) == list(range(5))
    assert pool_makespan(order, costs, 2) == 6.0


def test_pool_order_is_longest_first_for_one_worker_or_too_many_jobs():
    costs = [1.0, 4.0, 2.0, 3.0]
    assert pool_order(costs, 1) == [1, 3, 2, 0]
    assert pool_order(costs, 2, max_jobs=3) == [1, 3, 2, 0]
    assert pool_order([], 2) == []
