"""Growing pauses between polls: short while work is coming in, longer when idle.

One rule for every poll loop of the Flower runtimes (the server pulling replies, a warm
node pulling messages, a warm worker asking for tasks): the first pause after work is
``first`` seconds, each empty poll doubles it up to ``longest``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from types import ModuleType


class Backoff:
    """``wait()`` sleeps ``first``, then twice as long each call up to ``longest``;
    ``reset()`` (work arrived) starts again from ``first``. With ``reset_after`` set,
    a call that comes more than that many seconds after the previous pause ended counts
    as "work happened in between" and resets first (for loops that only call us when
    idle)."""

    def __init__(self, first: float, longest: float, reset_after: float | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 < first <= longest:
            raise ValueError(f"Backoff needs 0 < first <= longest, got {first}, {longest}")
        self.first, self.longest, self.reset_after = first, longest, reset_after
        self.sleep, self.clock = sleep, clock
        self.pause = first
        self.ended: float | None = None

    def reset(self) -> None:
        self.pause = self.first

    def next_pause(self) -> float:
        """The pause the next :meth:`wait` sleeps (and advance the doubling)."""
        if (self.reset_after is not None and self.ended is not None
                and self.clock() - self.ended > self.reset_after):
            self.reset()
        pause = self.pause
        self.pause = min(self.pause * 2, self.longest)
        return pause

    def wait(self, at_most: float | None = None) -> None:
        pause = self.next_pause()
        self.sleep(pause if at_most is None else max(0.0, min(pause, at_most)))
        self.ended = self.clock()


#: an object of a message that is not stored yet: first and longest pause between pulls
OBJECT_FIRST_S, OBJECT_LONGEST_S = 0.01, 0.2


def quick_object_pulls(module: ModuleType, name: str, max_time: float | None = None) -> None:
    """Make ``module.name`` (flwr's ``pull_objects`` or ``pull_and_inflate_object_from_tree``
    as that module imported it) retry a missing object after 10 ms doubling to 0.2 s
    instead of flwr's 1 s doubling to 10 s. A message is listed before all its objects
    are stored (the sender pushes the message, then its objects), so the first pull often
    misses one: with flwr's pauses that costs a whole second per exchange on loopback.
    Only this process's flwr changes (a warm node's, a ServerApp's). ``max_time``: give up
    after that many seconds (default: flwr's)."""
    pull = getattr(module, name)
    if not isinstance(pull, functools.partial):
        limits = {} if max_time is None else {"max_time": max_time}
        setattr(module, name, functools.partial(pull, initial_backoff=OBJECT_FIRST_S,
                                                backoff_cap=OBJECT_LONGEST_S, **limits))
