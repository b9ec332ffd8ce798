import pytest

from regionfed.runtime.threads import busy_cores, choose_threads, core_times

STAT = """cpu  300 0 100 600 0 0 0 0 0 0
cpu0 {a} 0 0 {ia} 0 0 0 0 0 0
cpu1 {b} 0 0 {ib} 0 0 0 0 0 0
intr 12345
"""


def stat(a, ia, b, ib):
    return STAT.format(a=a, ia=ia, b=b, ib=ib)


def test_core_times_counts_idle_and_iowait_as_not_busy():
    times = core_times("cpu0 10 1 2 30 4 0 0 0 0 0\ncpu 1 1 1 1 1 1 1 1\n")
    assert times == {0: (13, 47)}


def test_busy_cores_sums_each_cores_busy_share_over_the_interval():
    # core 0 fully busy (100 of 100 ticks), core 1 a quarter busy (25 of 100)
    reads = iter([stat(0, 0, 0, 0), stat(100, 0, 25, 75)])
    assert busy_cores([0, 1], interval=0, read=lambda: next(reads)) == pytest.approx(1.25)
    reads = iter([stat(0, 0, 0, 0), stat(100, 0, 25, 75)])
    assert busy_cores([1], interval=0, read=lambda: next(reads)) == pytest.approx(0.25)


def test_busy_cores_is_none_where_the_counters_cannot_be_read():
    def fail():
        raise OSError("no /proc")

    assert busy_cores([0], interval=0, read=fail) is None
    reads = iter([stat(0, 0, 0, 0), stat(1, 1, 1, 1)])
    assert busy_cores([7], interval=0, read=lambda: next(reads)) is None  # not a core here


@pytest.mark.parametrize("busy, threads", [(0.0, 2), (0.4, 2), (0.6, 1), (1.1, 1), (2.0, 1),
                                            (None, 2)])
def test_threads_are_the_free_cores_at_least_one(busy, threads):
    n, why = choose_threads([0, 1], busy, environ={})
    assert n == threads
    assert ("busy with other work" in why) == (busy is not None)


def test_omp_num_threads_set_by_the_user_wins():
    assert choose_threads([0, 1], 0.0, environ={"OMP_NUM_THREADS": "1"}) == (
        1, "1 (OMP_NUM_THREADS)")
    assert choose_threads([0, 1], 0.0, environ={"OMP_NUM_THREADS": "x"})[0] == 2  # ignored
