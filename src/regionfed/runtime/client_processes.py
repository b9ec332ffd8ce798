"""Clients' training and gradient calls spread over worker processes, one torch thread each.

On a small CPU a client's local training is a stream of small kernels: a second torch thread
barely speeds it up (the default workload's 80 clients: 1.84 s a round at one thread and at
two), while a second *process* doubles the throughput (two halves at one thread each, side
by side: 0.91 and 0.92 s). :class:`ClientProcesses` computes a window of parked calls
(:mod:`.lockstep`) that way: this process takes one share and each spawned worker another,
every share at one torch thread, with the same :func:`~.local_training.train_local` /
:func:`~.local_training.mean_gradient` the sequential loop runs — so a call's result does not
depend on which process computed it, nor on how the window was split.

Workers are fresh interpreters (``python -m regionfed.runtime.client_processes``: torch's
threads do not survive a fork, and multiprocessing's spawn would re-run the user's main
script) talking over two pipes, and start in the background: a window is computed here alone
until they have imported torch and said they are ready. Each
client has a home process, chosen the first time it is seen (the least loaded share of that
window); its prepared training data is sent there once and cached. Parameters travel as
pickled tensors (a 205k-parameter vector: ~0.1 ms each way).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import Any

import torch

from regionfed.models.tasks import Task
from regionfed.runtime.local_training import mean_gradient, train_local
from regionfed.runtime.lockstep import GRADIENT_CALL, TRAIN_CALL, ParkedCall

_READY = b"ready"


class ClientProcessError(RuntimeError):
    """A worker process failed a call or exited."""


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch at one thread inside the block (the shares run side by side on the cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def call_cost(call: ParkedCall) -> float:
    """Relative cost of a parked call: its optimizer steps (a gradient: one epoch)."""
    steps = max(1, call.client.steps_per_epoch())
    if call.kind == GRADIENT_CALL:
        return float(steps)
    total = steps * call.args["epochs"]
    if call.args.get("max_steps") is not None:
        total = min(total, call.args["max_steps"])
    return float(total)


def compute_call(kind: str, task: Task, model: torch.nn.Module, prepared: Any,
                 args: dict[str, Any], batch_size: int, optimizer: Any,
                 gradient_batch_size: int) -> Any:
    """One parked call as the sequential loop computes it (here, in a worker, or for a
    lockstep kind with a single call)."""
    if kind == GRADIENT_CALL:
        return mean_gradient(task, model, args["params"], prepared, gradient_batch_size)
    return train_local(task, model, prepared=prepared, batch_size=batch_size,
                       optimizer=optimizer, **args)


def _portable(kind: str, args: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments as they travel: a generator as its state (it is rebuilt there)."""
    if kind != TRAIN_CALL:
        return dict(args)
    out = dict(args)
    out["generator"] = args["generator"].get_state()
    return out


def _restored(kind: str, args: dict[str, Any]) -> dict[str, Any]:
    if kind != TRAIN_CALL:
        return args
    generator = torch.Generator()
    generator.set_state(args["generator"])
    return {**args, "generator": generator}


def serve(conn: _Duplex) -> None:
    """A worker: loads the task it is sent, then computes the calls it is sent until the
    pipe closes."""
    torch.set_num_threads(1)
    try:
        task, settings = pickle.loads(conn.recv_bytes())
        model = task.build_model(0)
    except Exception as error:  # e.g. a task class the worker cannot import
        conn.send_bytes(pickle.dumps(("failed", f"{type(error).__name__}: {error}")))
        return
    prepared: dict[str, Any] = {}
    conn.send_bytes(_READY)
    while True:
        try:
            message = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if message is None:
            return
        kind, new_data, calls = message
        prepared.update(new_data)
        try:
            reply = ("ok", [compute_call(kind, task, model, prepared[client_id],
                                         _restored(kind, args), **settings)
                            for client_id, args in calls])
        except Exception as error:  # handed back; raised in the coordinating process
            reply = ("error", error)
        try:
            blob = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # an error that does not pickle travels as its message
            blob = pickle.dumps(("error", ClientProcessError(
                f"{type(reply[1]).__name__}: {reply[1]}")))
        conn.send_bytes(blob)


class ClientProcesses:
    """This process plus ``workers`` spawned ones computing parked client calls (module
    doc). :meth:`compute` is a :data:`~.lockstep.BatchFn`; :meth:`close` ends the workers."""

    def __init__(self, task: Task, model: torch.nn.Module, batch_size: int, optimizer: Any,
                 gradient_batch_size: int, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"ClientProcesses needs at least one worker, got {workers}")
        self.task, self.model = task, model
        self.settings = {"batch_size": batch_size, "optimizer": optimizer,
                         "gradient_batch_size": gradient_batch_size}
        try:
            blob = pickle.dumps((task, self.settings), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as error:
            raise ClientProcessError(
                f"the task cannot be sent to worker processes ({type(error).__name__}: "
                f"{error}); use training.client_batching on or off") from error
        # the workers import what this process can (its sys.path, e.g. a source checkout)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
               "OMP_NUM_THREADS": "1"}
        self._conns: list[_Duplex] = []
        self._procs: list[subprocess.Popen] = []
        for _ in range(workers):
            to_child, from_parent = os.pipe()
            to_parent, from_child = os.pipe()
            proc = subprocess.Popen(
                [sys.executable, "-m", __name__, str(to_child), str(from_child)],
                pass_fds=(to_child, from_child), env=env, stdin=subprocess.DEVNULL)
            os.close(to_child)
            os.close(from_child)
            conn = _Duplex(Connection(to_parent, writable=False),
                           Connection(from_parent, readable=False))
            # sent from a thread: the worker reads it once torch is imported (seconds)
            threading.Thread(target=_send_quietly, args=(conn, blob), daemon=True).start()
            self._conns.append(conn)
            self._procs.append(proc)
        self._ready = [False] * workers
        #: client id → its process (0: this one; k ≥ 1: worker k − 1)
        self.home: dict[str, int] = {}
        self._cached: list[set[str]] = [set() for _ in range(workers)]
        #: calls computed per process over the run (0: this one)
        self.calls_per_process = [0] * (workers + 1)

    @property
    def workers(self) -> int:
        return len(self._conns)

    def ready_workers(self) -> list[int]:
        """Indices of the workers that have started (checked without waiting)."""
        for k, conn in enumerate(self._conns):
            if not self._ready[k] and conn.poll(0):
                self._expect_ready(k)
        return [k for k, ready in enumerate(self._ready) if ready]

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until every worker has started (tests and benchmarks)."""
        for k, conn in enumerate(self._conns):
            if not self._ready[k]:
                if not conn.poll(timeout):
                    raise ClientProcessError(f"client worker {k} did not start in {timeout} s")
                self._expect_ready(k)

    def _expect_ready(self, k: int) -> None:
        try:
            got = self._conns[k].recv_bytes()
        except (EOFError, OSError) as error:
            raise ClientProcessError(f"client worker {k} exited while starting "
                                     f"(exit code {self._procs[k].poll()})") from error
        if got != _READY:
            status, why = pickle.loads(got)
            raise ClientProcessError(f"client worker {k} could not start: {why}")
        self._ready[k] = True

    def assign(self, calls: Sequence[ParkedCall], processes: Sequence[int]) -> list[int]:
        """The process of every call: its client's home if that process takes work now;
        otherwise (first sight, or its worker is not ready yet) the least loaded of
        ``processes``, larger calls placed first (LPT). First sight makes a home, once every
        worker is ready."""
        costs = [call_cost(c) for c in calls]
        load = dict.fromkeys(processes, 0.0)
        settled = len(processes) == self.workers + 1  # homes only once every worker runs
        where = [-1] * len(calls)
        for i, call in enumerate(calls):
            home = self.home.get(call.client.client_id)
            if home in load:
                where[i] = home
                load[home] += costs[i]
        for i in sorted(range(len(calls)), key=lambda i: -costs[i]):
            if where[i] >= 0:
                continue
            best = min(load, key=lambda p: (load[p], p))
            where[i] = best
            load[best] += costs[i]
            if settled:
                self.home.setdefault(calls[i].client.client_id, best)
        return where

    def compute(self, kind: str, calls: list[ParkedCall]) -> list[Any]:
        """Every call's result, in order; the shares run side by side."""
        processes = [0] + [k + 1 for k in self.ready_workers()]
        where = self.assign(calls, processes)
        sent = []
        for p in processes[1:]:
            mine = [i for i, w in enumerate(where) if w == p]
            if mine:
                self._send(p - 1, kind, [calls[i] for i in mine])
                sent.append((p, mine))
        results: list[Any] = [None] * len(calls)
        local = [i for i, w in enumerate(where) if w == 0]
        failure: Exception | None = None
        try:
            with one_torch_thread():
                for i in local:
                    call = calls[i]
                    results[i] = compute_call(kind, self.task, self.model,
                                              call.client.prepared_train, call.args,
                                              **self.settings)
        except Exception as error:  # the workers' replies are still read: pipes stay in step
            failure = error
        self.calls_per_process[0] += len(local)
        for p, mine in sent:  # every reply is read, even after a failure
            try:
                replies = self._receive(p - 1)
            except Exception as error:
                failure = failure or error
                continue
            for i, result in zip(mine, replies, strict=True):
                results[i] = result
            self.calls_per_process[p] += len(mine)
        if failure is not None:
            raise failure
        return results

    def _send(self, k: int, kind: str, calls: list[ParkedCall]) -> None:
        new_data = {}
        for call in calls:
            client_id = call.client.client_id
            if client_id not in self._cached[k]:
                new_data[client_id] = call.client.prepared_train
                self._cached[k].add(client_id)
        payload = [(call.client.client_id, _portable(kind, call.args)) for call in calls]
        try:
            self._conns[k].send_bytes(pickle.dumps((kind, new_data, payload),
                                                   protocol=pickle.HIGHEST_PROTOCOL))
        except (BrokenPipeError, OSError) as error:
            raise ClientProcessError(f"client worker {k} has exited (exit code "
                                     f"{self._procs[k].poll()})") from error

    def _receive(self, k: int) -> list[Any]:
        """Worker ``k``'s results; a call's exception is raised here as it was there."""
        try:
            status, value = pickle.loads(self._conns[k].recv_bytes())
        except (EOFError, OSError) as error:
            raise ClientProcessError(f"client worker {k} exited during a call (exit code "
                                     f"{self._procs[k].poll()})") from error
        if status != "ok":
            raise value
        return value

    def close(self) -> None:
        """End the workers (idempotent)."""
        for conn in self._conns:
            try:
                conn.send_bytes(pickle.dumps(None))
            except (BrokenPipeError, OSError):
                pass
            conn.close()
        for proc in self._procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._conns, self._procs, self._ready, self._cached = [], [], [], []


def _send_quietly(conn: _Duplex, blob: bytes) -> None:
    try:
        conn.send_bytes(blob)
    except OSError:  # the worker exited: reported when its readiness is awaited
        pass


class _Duplex:
    """Two one-way pipes as one connection (what a worker and its parent talk over)."""

    def __init__(self, incoming: Connection, outgoing: Connection) -> None:
        self.incoming, self.outgoing = incoming, outgoing

    def send_bytes(self, data: bytes) -> None:
        self.outgoing.send_bytes(data)

    def recv_bytes(self) -> bytes:
        return self.incoming.recv_bytes()

    def poll(self, timeout: float = 0.0) -> bool:
        return self.incoming.poll(timeout)

    def close(self) -> None:
        self.incoming.close()
        self.outgoing.close()


if __name__ == "__main__":  # a worker: python -m regionfed.runtime.client_processes R W
    serve(_Duplex(Connection(int(sys.argv[1]), writable=False),
                  Connection(int(sys.argv[2]), readable=False)))
