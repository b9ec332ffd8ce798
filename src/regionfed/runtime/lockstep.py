"""Client steps in lockstep: many clients' training calls as one batched computation.

A strategy's client step is ordinary code that calls ``client.train`` (or
``client.gradient``) zero or more times with arbitrary work in between: FedAvg trains once,
Ditto trains the shared model and then its personal one, regionfed-plus also scores
candidates on the client's validation split between the two. To train every client's
``s``-th call together (:func:`~regionfed.runtime.batched_training.train_local_batched`)
without rewriting any step, :meth:`Lockstep.run` runs each client's step in its own thread
and passes one baton between them — exactly one thread runs at any time:

1. each step runs, in order, until it asks for a batchable computation (it *parks*) or
   returns;
2. when every step has parked or returned, the parked calls are computed together (one
   batched call per kind; a kind with one call runs as the sequential loop would);
3. the parked steps resume, in order, each with its own result; back to 2 until all return.

Nothing runs concurrently, so the shared model, the clients' states and the strategy are
touched by one thread at a time in a fixed order, and each client draws its shuffling
generators in the order its own step makes the calls: a run is as deterministic as the
sequential loop and equal to it up to float summation order. A call that cannot be batched
(an extra loss other than :class:`~regionfed.algorithms.base.Proximal`) is computed on the
spot by the step's thread, and counted (:attr:`Lockstep.one_by_one`).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from regionfed.algorithms.base import Proximal

T = TypeVar("T")

TRAIN_CALL = "train"
GRADIENT_CALL = "gradient"


@dataclass
class ParkedCall:
    """One client's request from inside its step: ``kind`` (:data:`TRAIN_CALL` or
    :data:`GRADIENT_CALL`), the client, and the call's arguments (``train``: start, epochs,
    generator, proximal; ``gradient``: params)."""

    kind: str
    client: Any
    args: dict[str, Any]


#: computes a list of parked calls of one kind; returns one result per call, in order
BatchFn = Callable[[str, list[ParkedCall]], list[Any]]


class _Aborted(BaseException):
    """Delivered to parked steps when another step or the batch failed: they unwind."""


class _Step(threading.Thread):
    def __init__(self, lockstep: Lockstep, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.lockstep, self.fn = lockstep, fn
        self.resume = threading.Event()
        self.call: ParkedCall | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self.value: Any = None

    def run(self) -> None:
        _current.lockstep = self.lockstep
        _current.step = self
        try:
            self.value = self.fn()
        except BaseException as error:  # handed to the coordinator, re-raised there
            self.error = error
        finally:
            self.call = None
            self.lockstep._baton.set()

    def park(self, call: ParkedCall) -> Any:
        """Give the baton back with ``call``; wait for its result (or its failure)."""
        self.call, self.result, self.error = call, None, None
        self.lockstep._baton.set()
        self.resume.wait()
        self.resume.clear()
        if self.error is not None:
            raise self.error
        return self.result


_current = threading.local()


def active_lockstep() -> Lockstep | None:
    """The :class:`Lockstep` whose step runs on this thread (``None`` outside one)."""
    return getattr(_current, "lockstep", None)


class Lockstep:
    """Runs client steps in lockstep (module doc); ``batch`` computes the parked calls."""

    def __init__(self, batch: BatchFn, *, gradients: bool = True) -> None:
        self._batch = batch
        #: whether ``gradient`` calls park (else a step computes them on the spot)
        self.gradients = gradients
        self._baton = threading.Event()
        #: calls computed together with others, per kind
        self.batched: Counter[str] = Counter()
        #: calls computed on the spot, per reason
        self.one_by_one: Counter[str] = Counter()

    def park(self, kind: str, client: Any, **args: Any) -> Any:
        """From inside a step: wait for this call's batched result."""
        return _current.step.park(ParkedCall(kind, client, args))

    def note_one_by_one(self, reason: str) -> None:
        """From inside a step: a call computed on the spot, because ``reason``."""
        self.one_by_one[reason] += 1

    def run(self, steps: Sequence[Callable[[], T]]) -> list[T]:
        """Run every step to its end; their return values in order. The first failure
        (in step order, or of a batched computation) is raised once every step stopped."""
        threads = [_Step(self, fn) for fn in steps]
        failure: BaseException | None = None
        runnable: list[_Step] = threads
        while runnable:
            for step in runnable:
                self._pass_baton(step)
                if step.call is None and step.error is not None and failure is None:
                    failure = step.error
            parked = [s for s in runnable if s.call is not None]
            if failure is not None:
                self._abort(parked)
                break
            try:
                self._compute(parked)
            except BaseException as error:
                failure = error
                self._abort(parked)
                break
            runnable = parked
        for step in threads:
            if step.ident is not None:
                step.join()
        if failure is not None:
            raise failure
        return [step.value for step in threads]

    def _pass_baton(self, step: _Step) -> None:
        self._baton.clear()
        if step.ident is None:  # not started yet
            step.start()
        else:
            step.resume.set()
        self._baton.wait()

    def _compute(self, parked: list[_Step]) -> None:
        by_kind: dict[str, list[_Step]] = {}
        for step in parked:
            by_kind.setdefault(step.call.kind, []).append(step)
        for kind, members in by_kind.items():
            results = self._batch(kind, [s.call for s in members])
            if len(members) > 1:
                self.batched[kind] += len(members)
            for step, result in zip(members, results, strict=True):
                step.result = result

    def _abort(self, parked: list[_Step]) -> None:
        for step in parked:
            step.error = _Aborted()
            self._pass_baton(step)


def why_not_batchable(extra_loss: Any) -> str | None:
    """``None`` if a ``train`` call with this extra loss can be batched, else why not (the
    batched trainer knows the :class:`~regionfed.algorithms.base.Proximal` term only)."""
    if extra_loss is not None and not isinstance(extra_loss, Proximal):
        return "a custom extra loss"
    return None
