"""Client steps in lockstep: one thread at a time, calls computed together, failures raised."""

import threading
import time

import pytest
import torch

from regionfed.algorithms.base import Proximal
from regionfed.runtime.lockstep import (
    GRADIENT_CALL,
    TRAIN_CALL,
    Lockstep,
    active_lockstep,
    why_not_batchable,
)


class Recorder:
    """A batch function that records each batch (kind, clients) and answers client × 10."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.batches: list[tuple[str, list[int]]] = []
        self.fail_on = fail_on

    def __call__(self, kind, calls):
        self.batches.append((kind, [c.client for c in calls]))
        if self.fail_on is not None and len(self.batches) == self.fail_on:
            raise RuntimeError("batch failed")
        return [c.client * 10 + c.args.get("extra", 0) for c in calls]


def _step(lockstep, log, client, calls):
    def run():
        log.append(("start", client))
        total = 0
        for k in range(calls):
            total += lockstep.park(TRAIN_CALL, client, extra=k)
            log.append(("got", client, k))
        return total
    return run


def test_steps_park_and_their_calls_are_computed_together_in_order():
    batch, log = Recorder(), []
    lockstep = Lockstep(batch)
    # client 1 makes no call, client 3 one, clients 0 and 2 two
    calls = {0: 2, 1: 0, 2: 2, 3: 1}
    out = lockstep.run([_step(lockstep, log, c, n) for c, n in calls.items()])
    assert out == [0 + 1, 0, 20 + 21, 30]
    assert batch.batches == [(TRAIN_CALL, [0, 2, 3]), (TRAIN_CALL, [0, 2])]
    # one thread at a time, in client order, round by round
    assert log == [("start", 0), ("start", 1), ("start", 2), ("start", 3),
                   ("got", 0, 0), ("got", 2, 0), ("got", 3, 0), ("got", 0, 1), ("got", 2, 1)]
    assert lockstep.batched == {TRAIN_CALL: 5}


def test_kinds_are_computed_separately_and_a_single_call_is_not_counted_as_batched():
    batch = Recorder()
    lockstep = Lockstep(batch)

    def step(client, kind):
        return lambda: lockstep.park(kind, client)

    out = lockstep.run([step(0, TRAIN_CALL), step(1, GRADIENT_CALL), step(2, TRAIN_CALL)])
    assert out == [0, 10, 20]
    assert batch.batches == [(TRAIN_CALL, [0, 2]), (GRADIENT_CALL, [1])]
    assert lockstep.batched == {TRAIN_CALL: 2}


def test_only_one_step_runs_at_a_time_and_knows_its_lockstep():
    lockstep = Lockstep(Recorder())
    executing, most, inside = [0], [0], []

    def segment():  # a stretch of step code that would overlap if threads ran at once
        executing[0] += 1
        most[0] = max(most[0], executing[0])
        time.sleep(0.002)
        executing[0] -= 1

    def step(client):
        def run():
            inside.append(active_lockstep() is lockstep)
            segment()
            value = lockstep.park(TRAIN_CALL, client)
            segment()
            return value
        return run

    assert lockstep.run([step(c) for c in range(6)]) == [0, 10, 20, 30, 40, 50]
    assert most[0] == 1 and inside == [True] * 6
    assert active_lockstep() is None  # nothing of it leaks to the caller's thread


@pytest.mark.parametrize("where", ["step", "batch"])
def test_a_failure_is_raised_after_every_step_stopped(where):
    batch = Recorder(fail_on=1 if where == "batch" else None)
    lockstep = Lockstep(batch)
    finished = []

    def failing():
        raise ValueError("client 1 broke")

    def good(client):
        def run():
            try:
                return lockstep.park(TRAIN_CALL, client)
            finally:
                finished.append(client)
        return run

    steps = [good(0), failing if where == "step" else good(1), good(2)]
    before = threading.active_count()
    with pytest.raises(ValueError if where == "step" else RuntimeError):
        lockstep.run(steps)
    assert sorted(finished) == ([0, 2] if where == "step" else [0, 1, 2])  # all unwound
    assert threading.active_count() == before  # no thread left waiting


def test_which_train_calls_can_be_batched():
    assert why_not_batchable(None) is None
    assert why_not_batchable(Proximal(torch.zeros(3), 0.1)) is None
    assert why_not_batchable(lambda m: 0.0) == "a custom extra loss"
