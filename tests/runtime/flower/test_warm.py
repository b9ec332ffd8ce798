"""Warm client workers (issue 29): the pieces that run without a deployment — the poll
back-off, the shortened flwr waits (and that flwr still has the waits they shorten), the
node command and the app check. The deployment itself: tests/runtime/flower/test_deployment.py."""

import inspect
import threading

import pytest

pytest.importorskip("flwr")

from regionfed.runtime.flower.polling import Backoff  # noqa: E402


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def test_backoff_doubles_up_to_its_longest_pause_and_starts_again_after_a_reset():
    clock = FakeClock()
    backoff = Backoff(0.02, 0.1, sleep=clock.sleep, clock=clock)
    for _ in range(5):
        backoff.wait()
    backoff.reset()
    backoff.wait()
    backoff.wait(at_most=0.01)
    assert clock.slept == [0.02, 0.04, 0.08, 0.1, 0.1, 0.02, 0.01]


def test_backoff_resets_itself_when_work_happened_between_two_waits():
    clock = FakeClock()
    backoff = Backoff(0.02, 0.5, reset_after=0.05, sleep=clock.sleep, clock=clock)
    backoff.wait()
    backoff.wait()
    clock.now += 1.0  # a message was handled in between
    backoff.wait()
    assert clock.slept == [0.02, 0.04, 0.02]


def test_backoff_refuses_pauses_that_make_no_sense():
    with pytest.raises(ValueError, match="0 < first <= longest"):
        Backoff(0.5, 0.1)


def test_the_node_loop_backs_off_when_idle_and_waits_briefly_for_replies():
    from regionfed.runtime.flower.warm import (
        IDLE_FIRST_S,
        IDLE_LONGEST_S,
        LOCAL_WAIT_S,
        ShortSleeps,
    )

    slept: list[float] = []
    sleeps = ShortSleeps(sleep=slept.append)
    for _ in range(8):
        sleeps.sleep(3)  # flwr 1.42's idle pull
    assert slept[0] == IDLE_FIRST_S and slept[-1] == IDLE_LONGEST_S
    assert not sleeps.message_waiting.is_set()
    sleeps.sleep(0.5)  # waiting for the worker's reply
    assert slept[-1] == LOCAL_WAIT_S and sleeps.message_waiting.is_set()
    assert sleeps.monotonic() > 0  # every other attribute is the time module's


def test_the_flwr_internals_a_warm_node_relies_on_are_there():
    """The contract with flwr's internals (pinned: flwr==1.42.0). Another version fails
    here, loudly, not silently in a slow or stuck deployment: the version, the task API the
    worker speaks in flower-superexec's place, the steps of flwr-clientapp it reuses, and
    the waits it shortens."""
    import flwr
    import flwr.superlink.grid.http_grid as http_grid
    import flwr.supernode.runtime.run_clientapp as clientapp
    import flwr.supernode.start_client_internal as loop
    from flwr.proto.runtime_pb2 import AcquireTaskRequest, AcquireTaskResponse
    from flwr.supercore.constant import TaskType
    from flwr.supercore.runtime import RuntimeHttpClient

    assert flwr.__version__ == "1.42.0", (
        f"warm workers are written against flwr 1.42.0's internals, found "
        f"{flwr.__version__}: re-check runtime/flower/warm.py and polling.py")
    assert TaskType.CLIENT_APP == "flwr-clientapp"
    assert "supported_task_types" in AcquireTaskRequest.DESCRIPTOR.fields_by_name
    assert {"task", "token"} <= set(AcquireTaskResponse.DESCRIPTOR.fields_by_name)
    assert hasattr(RuntimeHttpClient, "AcquireTask")
    for name in ("pull_task_input", "push_message", "push_task_output"):
        assert callable(getattr(clientapp, name)), name
    assert list(inspect.signature(clientapp.push_task_output).parameters) == [
        "client", "context", "sub_status", "details"]

    source = inspect.getsource(loop)
    assert "time.sleep(3)" in source and "time.sleep(0.5)" in source
    # DroppedRuns: the loop's two steps, called with keywords; the task made by keyword
    assert "run_id = _pull_and_store_message(\n                state=state," in source
    assert "            _push_messages(\n                state=state," in source
    assert "task_id = state.create_task(" in source and "run_id=run_id," in source
    assert "pull_objects(" in source
    assert "pull_and_inflate_object_from_tree(" in inspect.getsource(clientapp.pull_task_input)
    assert "pull_objects(" in inspect.getsource(http_grid.HttpGrid.pull_messages)
    for module, name in ((loop, "pull_objects"), (http_grid, "pull_objects"),
                         (clientapp, "pull_and_inflate_object_from_tree")):
        parameters = inspect.signature(getattr(module, name)).parameters
        assert {"initial_backoff", "backoff_cap"} <= set(parameters), name


def test_quick_object_pulls_rebinds_a_modules_pull_once():
    import types

    from regionfed.runtime.flower.polling import (
        OBJECT_FIRST_S,
        OBJECT_LONGEST_S,
        quick_object_pulls,
    )

    def pull(ids, fn, *, initial_backoff=1.0, backoff_cap=10.0):
        return initial_backoff, backoff_cap

    module = types.SimpleNamespace(pull_objects=pull)
    quick_object_pulls(module, "pull_objects")
    quick_object_pulls(module, "pull_objects")  # twice: still one layer
    assert module.pull_objects([], None) == (OBJECT_FIRST_S, OBJECT_LONGEST_S)
    assert module.pull_objects.func is pull


def test_a_warm_node_runs_only_regionfeds_app():
    from regionfed.runtime.flower.deployment import APP_ID, APP_PYPROJECT
    from regionfed.runtime.flower.warm import is_regionfed_app

    assert is_regionfed_app(APP_ID)
    assert not is_regionfed_app("someone/another-app")
    publisher, name = APP_ID.split("/")
    assert f'publisher = "{publisher}"' in APP_PYPROJECT and f'name = "{name}"' in APP_PYPROJECT


def test_a_warm_node_starts_no_superexec(capsys):
    from regionfed.cli import main

    assert main(["flower", "node", "--superlink", "127.0.0.1:9093", "--region", "eu",
                 "--print-command"]) == 0
    assert capsys.readouterr().out.strip().endswith("--isolation process")
    assert main(["flower", "node", "--superlink", "127.0.0.1:9093", "--region", "eu",
                 "--worker", "fresh", "--print-command"]) == 0
    assert "--isolation" not in capsys.readouterr().out


def test_an_unknown_worker_is_refused(capsys):
    from regionfed.cli import main
    from regionfed.errors import ConfigError
    from regionfed.runtime.flower.processes import LocalDeployment, supernode_command

    with pytest.raises(SystemExit) as exit_:
        main(["flower", "node", "--superlink", "127.0.0.1:9093", "--region", "eu",
              "--worker", "lukewarm"])
    assert exit_.value.code == 2 and "--worker" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--worker must be one of warm, fresh"):
        supernode_command("127.0.0.1:9093", "eu", worker="lukewarm")
    with pytest.raises(ConfigError, match="worker must be one of"):
        LocalDeployment([("eu", 0)], "/tmp/unused", worker="lukewarm")


def test_the_worker_keeps_polling_while_the_nodes_api_is_not_up():
    """Started before the SuperNode's Runtime API listens: it retries instead of dying
    (a dead worker would leave the node taking messages it never answers)."""
    from regionfed.runtime.flower.processes import free_ports
    from regionfed.runtime.flower.warm import WarmWorker

    (port,) = free_ports(1)
    worker = WarmWorker(f"127.0.0.1:{port}")
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    worker.wake.set()
    thread.join(timeout=1.0)
    assert thread.is_alive() and worker.handled == 0
    worker.stop.set()
    worker.wake.set()
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_the_task_heartbeat_answers_instead_of_interrupting_the_node():
    """flwr's own task heartbeat raises SIGINT when the node no longer holds the task —
    a warm node would shut down; ours answers False."""
    from types import SimpleNamespace

    from regionfed.runtime.flower.warm import task_heartbeat

    class Client:
        def __init__(self, success):
            self.success = success

        def SendTaskHeartbeat(self, request):  # noqa: N802 - flwr's RPC name
            return SimpleNamespace(success=self.success)

    assert task_heartbeat(Client(True))() is True
    assert task_heartbeat(Client(False))() is False


def test_a_tasks_objects_are_awaited_while_the_node_holds_the_task(monkeypatch):
    """The worker claims a task before its objects reach the node: it retries while the
    task lives, and moves on once the node gave the message up (its run was stopped)."""
    import flwr.supernode.runtime.run_clientapp as clientapp
    from flwr.supercore.inflatable.inflatable_utils import ObjectPullError

    from regionfed.runtime.flower.warm import pull_input

    attempts = []

    def pull(client):
        attempts.append(1)
        if len(attempts) < 3:
            raise ObjectPullError("obj", "not there yet")
        return "message", "context", "run", "fab"

    monkeypatch.setattr(clientapp, "pull_task_input", pull)
    assert pull_input(None, alive=lambda: True) == ("message", "context", "run")
    assert len(attempts) == 3
    attempts.clear()
    with pytest.raises(ObjectPullError):
        pull_input(None, alive=lambda: False)
    assert len(attempts) == 1


class FakeNodeState:
    """The part of flwr's NodeState the node-loop guards touch."""

    def __init__(self, replies):
        self.replies, self.deleted, self.tasks = list(replies), [], []

    def create_task(self, *, task_type, run_id, fab_hash=None):
        self.tasks.append(run_id)
        return len(self.tasks)

    def get_messages_legacy(self, *, run_ids=None, is_reply=None):
        return [r for r in self.replies if run_ids is None or r.metadata.run_id in run_ids]

    def delete_messages(self, *, message_ids):
        self.deleted.append(tuple(message_ids))


def _reply(run_id, message_id, reply_to):
    from types import SimpleNamespace

    return SimpleNamespace(metadata=SimpleNamespace(run_id=run_id, message_id=message_id,
                                                    reply_to_message_id=reply_to))


def test_a_message_dropped_after_its_task_was_made_marks_its_run_stopped():
    """The loop made the task, then dropped the message (its run stopped): that run's
    replies must never be sent in a later message's place."""
    from regionfed.runtime.flower.warm import DroppedRuns

    dropped = DroppedRuns()
    state = FakeNodeState([])

    def stopped_run(**kwargs):
        kwargs["state"].create_task(task_type="flwr-clientapp", run_id=7)
        return None  # flwr: "Run ID 7 is not in RUNNING status. Ignoring message"

    def idle(**kwargs):
        return None  # nothing to pull: no task made

    def running(**kwargs):
        kwargs["state"].create_task(task_type="flwr-clientapp", run_id=8)
        return 8

    for pull in (idle, running):
        dropped.guard_pull(pull)(state=state)
    assert dropped.runs == set()
    dropped.guard_pull(stopped_run)(state=state)
    assert dropped.runs == {7} and state.tasks == [8, 7]
    assert "create_task" not in vars(state)  # the recorder is gone again


def test_stored_replies_of_a_stopped_run_are_deleted_before_the_loop_waits():
    from types import SimpleNamespace

    from regionfed.runtime.flower.warm import DroppedRuns

    dropped = DroppedRuns()
    dropped.runs.add(7)
    state = FakeNodeState([_reply(7, "r7", "m7"), _reply(8, "r8", "m8")])
    store = SimpleNamespace(deleted=[], delete=lambda i: store.deleted.append(i))
    pushed = []
    dropped.guard_push(lambda **kwargs: pushed.append(kwargs))(state=state,
                                                              object_store=store)
    assert state.deleted == [("r7", "m7")] and store.deleted == ["r7"]
    assert len(pushed) == 1  # then flwr's own step runs, for run 8's reply
