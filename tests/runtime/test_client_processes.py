"""Client calls computed over worker processes (``client_batching: processes``)."""


import pytest
import torch

from regionfed.algorithms.base import Proximal
from regionfed.config import RunConfig, TrainingConfig
from regionfed.runtime.client_processes import (
    ClientProcessError,
    ClientProcesses,
    compute_call,
    one_torch_thread,
)
from regionfed.runtime.local_training import OptimizerConfig
from regionfed.runtime.lockstep import GRADIENT_CALL, TRAIN_CALL, ParkedCall
from regionfed.runtime.params import get_flat
from regionfed.runtime.simulator import Simulator

FAST = TrainingConfig(rounds=2, local_epochs=1, batch_size=32, eval_every=1)


@pytest.fixture
def workers_ready(monkeypatch):
    """Every window waits for the workers (a run otherwise computes here alone until they
    have started, which a short test run may never see)."""
    ready = ClientProcesses.ready_workers

    def wait_then_ready(self):
        self.wait_ready()
        return ready(self)

    monkeypatch.setattr(ClientProcesses, "ready_workers", wait_then_ready)


def simulator_calls(sim, start):
    """One call of every option the batched trainer knows, and a full-data gradient."""
    clients = list(sim.clients.values())
    n = start.numel()
    mask = torch.zeros(n, dtype=torch.bool)
    mask[: n // 2] = True

    def train(client, seed, **extra):
        args = {"start": start, "epochs": 1, "generator": torch.Generator().manual_seed(seed),
                "extra_loss": None, "trainable": None, "mixing": None, "max_steps": None}
        return ParkedCall(TRAIN_CALL, client, {**args, **extra})

    return [train(clients[0], 1),
            train(clients[1], 2, extra_loss=Proximal(start + 0.01, 0.5)),
            train(clients[2], 3, trainable=mask),
            train(clients[3], 4, mixing=(0.25, 0.75 * start), max_steps=1),
            ParkedCall(GRADIENT_CALL, clients[4], {"params": start})]


def in_this_process(sim, call):
    kind = call.kind
    args = dict(call.args)
    if kind == TRAIN_CALL:  # a fresh generator in the same state: the call's own is used up
        args["generator"] = torch.Generator().manual_seed(args["generator"].initial_seed())
    with one_torch_thread():
        return compute_call(kind, sim.task, sim.model, call.client.prepared_train, args,
                            sim.training.batch_size, sim.training.optimizer,
                            sim.training.gradient_batch_size)


def test_a_worker_computes_what_this_process_computes(tiny_federation, tiny_task):
    """Bit for bit, every option: both sides run the sequential loop at one torch thread."""
    sim = Simulator(tiny_federation, tiny_task, FAST, seed=0)
    start = get_flat(sim.model)
    pool = ClientProcesses(tiny_task, sim.model, 32, FAST.optimizer, 256, workers=1)
    try:
        pool.wait_ready()
        calls = simulator_calls(sim, start)
        # every call on the worker: each client's home is made there
        pool.home = {call.client.client_id: 1 for call in calls}
        remote = [pool.compute(TRAIN_CALL, calls[:4]), pool.compute(GRADIENT_CALL, calls[4:])]
        assert pool.calls_per_process == [0, 5]
        got = remote[0] + remote[1]
        calls = simulator_calls(sim, start)  # fresh generators
        want = [in_this_process(sim, call) for call in calls]
        for (params, loss), (want_params, want_loss) in zip(got[:4], want[:4], strict=True):
            assert torch.equal(params, want_params) and loss == want_loss
        assert torch.equal(got[4], want[4])
        assert not torch.equal(got[0][0], start)  # it trained
        # the second window reuses the worker's copy of the clients' data
        pool.compute(TRAIN_CALL, simulator_calls(sim, start)[:1])
        assert pool.calls_per_process == [0, 6]
    finally:
        pool.close()


def test_a_window_is_shared_out_and_homes_stay(tiny_federation, tiny_task):
    """Largest calls first to the least loaded process; a client keeps its process."""
    sim = Simulator(tiny_federation, tiny_task, FAST, seed=0)
    pool = ClientProcesses.__new__(ClientProcesses)  # assignment only: no workers started
    pool._conns, pool.home = [object()], {}
    calls = simulator_calls(sim, get_flat(sim.model))[:3]
    first = pool.assign(calls, [0, 1])
    assert sorted(set(first)) == [0, 1]
    assert pool.assign(list(reversed(calls)), [0, 1]) == list(reversed(first))
    # while the worker is not ready, this process takes every call and no home is made
    pool.home = {}
    assert pool.assign(calls, [0]) == [0, 0, 0] and pool.home == {}


def test_a_run_over_processes_equals_the_sequential_run(tiny_federation, tiny_task,
                                                        workers_ready, monkeypatch):
    """FedAvg and regionfed-meta (its full-data gradients go to the processes too): the
    sequential loop's parameters, bit for bit, at one torch thread; the log says how."""
    from regionfed.algorithms.registry import build_strategy

    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)  # as the sequential run had
    spread = []
    compute = ClientProcesses.compute

    def counted(self, kind, calls):
        out = compute(self, kind, calls)
        spread.append((kind, list(self.calls_per_process)))
        return out

    monkeypatch.setattr(ClientProcesses, "compute", counted)
    for method in ("fedavg", "regionfed-meta"):
        runs = {}
        for mode in ("off", "processes"):
            training = FAST.model_copy(update={
                "client_batching": mode, "optimizer": OptimizerConfig(name="sgd", lr=0.1)})
            with one_torch_thread():
                runs[mode] = Simulator(tiny_federation, tiny_task, training, seed=0).run(
                    build_strategy(method, RunConfig(methods=[method])))
        assert runs["processes"].history[0]["client_batching"] == \
            "processes (2 processes, one torch thread each)"
        assert torch.equal(runs["processes"].final_params, runs["off"].final_params)
        assert runs["processes"].test["overall"] == runs["off"].test["overall"]
    kinds = {kind for kind, _ in spread}
    assert kinds == {TRAIN_CALL, GRADIENT_CALL}
    assert all(counts[1] > 0 for _, counts in spread[-1:])  # the worker took calls


def test_a_failing_call_raises_its_own_error_here(tiny_federation, tiny_task):
    sim = Simulator(tiny_federation, tiny_task, FAST, seed=0)
    pool = ClientProcesses(tiny_task, sim.model, 32, FAST.optimizer, 256, workers=1)
    try:
        pool.wait_ready()
        call = simulator_calls(sim, torch.zeros(3))[0]  # fails inside train_local
        with pytest.raises(Exception) as here:
            in_this_process(sim, call)
        pool.home = {call.client.client_id: 1}
        with pytest.raises(type(here.value)) as there:
            pool.compute(TRAIN_CALL, [call])
        assert str(there.value) == str(here.value)
        # the pipe is still in step: the next window works
        good = simulator_calls(sim, get_flat(sim.model))[0]
        assert pool.compute(TRAIN_CALL, [good])[0][0].shape == get_flat(sim.model).shape
    finally:
        pool.close()


def test_a_worker_that_dies_is_a_clear_error(tiny_federation, tiny_task):
    sim = Simulator(tiny_federation, tiny_task, FAST, seed=0)
    pool = ClientProcesses(tiny_task, sim.model, 32, FAST.optimizer, 256, workers=1)
    try:
        pool.wait_ready()
        pool._procs[0].kill()
        pool._procs[0].wait()
        call = simulator_calls(sim, get_flat(sim.model))[0]
        pool.home = {call.client.client_id: 1}
        with pytest.raises(ClientProcessError, match="client worker 0 (has exited|exited)"):
            pool.compute(TRAIN_CALL, [call])
    finally:
        pool.close()


def test_a_task_that_cannot_be_sent_is_a_clear_error(tiny_federation, tiny_task,
                                                     monkeypatch):
    sim = Simulator(tiny_federation, tiny_task, FAST, seed=0)
    monkeypatch.setattr(tiny_task, "scorer", lambda x: x, raising=False)  # does not pickle
    with pytest.raises(ClientProcessError, match="cannot be sent to worker processes"):
        ClientProcesses(tiny_task, sim.model, 32, FAST.optimizer, 256, workers=1)


def test_workers_end_with_the_run(tiny_federation, tiny_task, workers_ready, monkeypatch):
    from regionfed.algorithms.fedavg import FedAvg

    started = []
    init = ClientProcesses.__init__

    def keep(self, *args, **kwargs):
        init(self, *args, **kwargs)
        started.append(list(self._procs))

    monkeypatch.setattr(ClientProcesses, "__init__", keep)
    training = FAST.model_copy(update={"client_batching": "processes"})
    Simulator(tiny_federation, tiny_task, training, seed=0).run(FedAvg())
    assert len(started) == 1
    assert all(proc.poll() is not None for proc in started[0])
