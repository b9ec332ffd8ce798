"""Warm client workers: a regionfed SuperNode that runs every message of a run in one
process, with the client's federation, task and model built once.

A plain ``flower-supernode`` starts a ``flower-superexec``, which starts a fresh
``flwr-clientapp`` process for every message: each re-imports torch, installs the app
bundle, loads the ClientApp and rebuilds the client's data (seconds per message), and the
SuperNode sleeps 3 s whenever a pull from the SuperLink comes back empty. A warm node is one
process that holds

* the SuperNode itself (flwr's own ``flower-supernode`` entry point, in-process, with
  ``--isolation process``: it starts no SuperExec), whose idle pulls back off from 20 ms to
  0.25 s instead of sleeping 3 s, and whose waits on its own local state poll every 10 ms
  instead of 0.5 s; and
* a :class:`WarmWorker` thread in the SuperExec's place: it claims each task from the node's
  Runtime API and runs it as ``flwr-clientapp`` would (pull the task input, run the
  ClientApp, push the reply and the task output) — but with regionfed's ClientApp loaded
  once, so :func:`~regionfed.runtime.flower.node.build_node`'s per-process cache keeps the
  client between messages.

It runs only regionfed's app: a task of another app is answered with an error reply.
The sleep shortening reaches into ``flwr.supernode.start_client_internal`` (flwr 1.42, the
pinned version); a test checks that the sleeps it shortens are still there.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any, NoReturn

from regionfed.runtime.flower import flower_environment, require_flwr
from regionfed.runtime.flower.polling import Backoff, quick_object_pulls

#: the SuperNode's pause after an empty pull from the SuperLink (flwr 1.42: 3 s)
IDLE_PULL_S = 3.0
#: a warm node's idle pulls: first and longest pause
IDLE_FIRST_S, IDLE_LONGEST_S = 0.02, 0.25
#: one attempt of the worker at a task's message objects (:func:`pull_input`)
PULL_ATTEMPT_S = 5.0
#: a warm node's waits on its own state (a reply being ready; flwr 1.42: 0.5 s)
LOCAL_WAIT_S = 0.01
#: the worker's polls of the Runtime API for a task, when the node does not wake it: first
#: and longest pause
TASK_FIRST_S, TASK_LONGEST_S = 0.02, 1.0

LOG = logging.getLogger("regionfed.flower.warm")


class ShortSleeps:
    """Stands in for the ``time`` module inside flwr's SuperNode loop: every attribute is
    ``time``'s, except ``sleep``: the idle pull's pause grows from :data:`IDLE_FIRST_S`
    to :data:`IDLE_LONGEST_S` (reset once messages flow again), local waits are capped at
    :data:`LOCAL_WAIT_S`."""

    def __init__(self, sleep: Any = time.sleep) -> None:
        self._sleep = sleep
        # an idle-pull sleep more than 50 ms after the last one ended: a message was
        # handled in between, so the next message is likely near
        self.idle = Backoff(IDLE_FIRST_S, IDLE_LONGEST_S, reset_after=0.05, sleep=sleep)
        #: set while the loop waits for a reply: a stored message awaits the worker
        self.message_waiting = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        if seconds >= IDLE_PULL_S:
            self.idle.wait()
        else:
            self.message_waiting.set()
            self._sleep(min(seconds, LOCAL_WAIT_S))


def shorten_flower_waits() -> ShortSleeps:
    """Shorten flwr's waits in this (warm node) process: the SuperNode loop's sleeps
    (:class:`ShortSleeps`), and the retries of a message object not stored yet — both
    where the node pulls a message from the SuperLink and where the worker pulls it from
    the node (a worker claims a task as soon as the node creates it, before the node has
    the message's objects): :func:`~regionfed.runtime.flower.polling.quick_object_pulls`."""
    import flwr.supernode.runtime.run_clientapp as clientapp
    import flwr.supernode.start_client_internal as loop

    loop.time = ShortSleeps()  # type: ignore[assignment]
    quick_object_pulls(loop, "pull_objects")
    quick_object_pulls(clientapp, "pull_and_inflate_object_from_tree",
                       max_time=PULL_ATTEMPT_S)  # pull_input retries while the task lives
    return loop.time


def guard_dropped_runs() -> DroppedRuns:
    """Install :class:`DroppedRuns` around flwr's node loop steps (this process only)."""
    import flwr.supernode.start_client_internal as loop

    dropped = DroppedRuns()
    loop._pull_and_store_message = dropped.guard_pull(loop._pull_and_store_message)
    loop._push_messages = dropped.guard_push(loop._push_messages)
    return dropped


class DroppedRuns:
    """Keeps a warm node's replies in step after a run is stopped mid-exchange.

    flwr's node loop creates a message's task *before* it has pulled the message's
    objects; when the run stops meanwhile, the loop drops the message (no reply is
    awaited) — but the warm worker may already have claimed the task, and its reply would
    then sit in the node's state until the next message arrives, be sent (and ignored) in
    that message's place, and leave the node one reply behind for good. So: a run whose
    message the loop dropped after creating its task is *dropped*; the worker does not
    push replies for it, and any such reply already stored is deleted before the loop
    waits for the next one. (A message dropped for another reason already fails its run:
    the server waits for its reply in vain.)"""

    def __init__(self) -> None:
        self.runs: set[int] = set()

    def guard_pull(self, pull: Any) -> Any:
        """``_pull_and_store_message`` that records the run of a message it dropped."""
        def pull_and_store(**kwargs: Any) -> Any:
            state = kwargs["state"]
            created: list[int] = []
            create_task = state.create_task

            def recording_create_task(**task: Any) -> Any:
                created.append(int(task["run_id"]))
                return create_task(**task)

            state.create_task = recording_create_task
            try:
                run_id = pull(**kwargs)
            finally:
                del state.create_task  # the class's method again
            if run_id is None and created:
                self.runs.add(created[-1])
            return run_id

        return pull_and_store

    def guard_push(self, push: Any) -> Any:
        """``_push_messages`` that first deletes stored replies of dropped runs."""
        def push_replies(**kwargs: Any) -> Any:
            state, store = kwargs["state"], kwargs["object_store"]
            if self.runs:
                stale = state.get_messages_legacy(run_ids=sorted(self.runs), is_reply=True)
                for reply in stale:
                    LOG.info("dropping the reply to %s of stopped run %s",
                             reply.metadata.reply_to_message_id, reply.metadata.run_id)
                    state.delete_messages(message_ids=[reply.metadata.message_id,
                                                       reply.metadata.reply_to_message_id])
                    store.delete(reply.metadata.message_id)
            return push(**kwargs)

        return push_replies


def is_regionfed_app(fab_id: str) -> bool:
    from regionfed.runtime.flower.deployment import APP_ID

    return fab_id == APP_ID


class WarmWorker:
    """Claims this node's ClientApp tasks from its Runtime API at ``address`` and runs
    each in this process (module docstring). ``handled`` counts the tasks run."""

    def __init__(self, address: str, stop: threading.Event | None = None,
                 wake: threading.Event | None = None,
                 dropped: DroppedRuns | None = None) -> None:
        self.address = address
        #: runs the node loop dropped a message of: no reply is pushed for them
        self.dropped = dropped or DroppedRuns()
        self.stop = stop or threading.Event()
        #: set by the node when a message is stored (:attr:`ShortSleeps.message_waiting`):
        #: the worker asks for its task at once instead of at its next poll
        self.wake = wake or threading.Event()
        self.handled = 0

    def _client(self, component: str, token: str | None = None) -> Any:
        from flwr.supercore.interceptors import (
            RuntimeTokenHttpInterceptor,
            RuntimeVersionHttpInterceptor,
        )
        from flwr.supercore.retry import make_simple_http_retry_invoker
        from flwr.supercore.runtime import RuntimeHttpClient

        interceptors: list[Any] = [RuntimeVersionHttpInterceptor(component_name=component)]
        retry = make_simple_http_retry_invoker()
        if token is not None:
            interceptors.append(RuntimeTokenHttpInterceptor(token))
        else:  # the task poll retries on its own, with its own short pauses (and can stop)
            retry.max_tries = 1
        return RuntimeHttpClient.from_server_address(
            server_address=self.address, insecure=True, root_certificates=None,
            interceptors=interceptors, retry_invoker=retry)

    def run(self) -> None:
        """Poll for tasks until :attr:`stop` is set."""
        from flwr.proto.runtime_pb2 import AcquireTaskRequest
        from flwr.supercore.constant import TaskType

        client = self._client("SuperExec")
        backoff = Backoff(TASK_FIRST_S, TASK_LONGEST_S, sleep=self.wake.wait)
        request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
        try:
            while not self.stop.is_set():
                self.wake.clear()
                try:
                    claimed = client.AcquireTask(request)
                except Exception as exc:  # noqa: BLE001 - the node's API is not up yet, or
                    LOG.debug("no task: %s", exc)  # restarting: keep polling
                    backoff.wait()
                    continue
                if claimed.HasField("task") and claimed.token:
                    try:
                        self.run_task(claimed.token)
                    except Exception:  # noqa: BLE001 - the worker must outlive any task
                        LOG.exception("a task failed outside the ClientApp (e.g. its run "
                                      "was stopped); the worker goes on")
                    backoff.reset()
                else:
                    backoff.wait()
        finally:
            client.close()

    def run_task(self, token: str) -> None:
        """One task, as ``flwr-clientapp`` runs it (flwr.supernode.runtime.run_clientapp),
        minus installing the bundle and loading the app: regionfed's ClientApp is loaded."""
        from flwr.app import Message
        from flwr.app.error import Error
        from flwr.common.constant import ErrorCode, SubStatus
        from flwr.supercore.heartbeat import HeartbeatSender
        from flwr.supernode.runtime.run_clientapp import push_message, push_task_output

        from regionfed.runtime.flower.app import client_app

        started = pulled = ran = time.perf_counter()
        client = self._client("flwr-clientapp", token)
        alive = task_heartbeat(client)
        heartbeat = HeartbeatSender(alive)
        heartbeat.start()
        message = context = reply = None
        status, details = SubStatus.FAILED, "the regionfed warm worker failed"
        try:
            message, context, run = pull_input(client, alive)
            pulled = time.perf_counter()
            if not is_regionfed_app(run.fab_id):
                raise RuntimeError(f"this regionfed node runs only regionfed's app, not "
                                   f"{run.fab_id!r}")
            reply = client_app(message=message, context=context)
            ran = time.perf_counter()
            status, details = SubStatus.COMPLETED, ""
        except Exception as exc:  # noqa: BLE001 - reported to the server as an error reply
            LOG.exception("the ClientApp raised an exception")
            details = f"{type(exc).__name__}: {exc}"
            if message is not None:
                reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                      reason=details), reply_to=message)
        finally:
            try:
                if message is not None and message.metadata.run_id in self.dropped.runs:
                    reply = None  # the node no longer waits for it (DroppedRuns)
                    status, details = SubStatus.FAILED, "the node dropped the message"
                if reply is not None and context is not None:
                    push_message(client, reply, context)
            except Exception as exc:  # noqa: BLE001 - as flwr-clientapp: log, report, go on
                LOG.error("the reply could not be pushed (%s: %s)", type(exc).__name__, exc)
                status, details = SubStatus.FAILED, f"pushing the reply failed: {exc}"
            finally:
                push_task_output(client=client, context=context, sub_status=status,
                                 details=details)
                heartbeat.stop()
                client.close()
        self.handled += 1
        kind = message.metadata.message_type if message is not None else "?"
        done = time.perf_counter()
        LOG.info("regionfed warm worker (pid %d): %s handled in %.3f s (pull %.3f, run %.3f, "
                 "push %.3f)", os.getpid(), kind, done - started, pulled - started,
                 ran - pulled, done - ran)


def task_heartbeat(client: Any) -> Any:
    """A task heartbeat that answers whether the node still holds the task. (flwr's own,
    ``make_task_heartbeat_fn_http``, raises SIGINT in its process when the task is gone —
    right for a one-message ``flwr-clientapp``, fatal for a warm node that serves on.)"""
    import httpx
    from flwr.proto.runtime_pb2 import SendTaskHeartbeatRequest

    def beat() -> bool:
        try:
            return bool(client.SendTaskHeartbeat(SendTaskHeartbeatRequest()).success)
        except httpx.HTTPError:
            return False

    return beat


def pull_input(client: Any, alive: Any) -> tuple[Any, Any, Any]:
    """(message, context, run) of the claimed task, as ``pull_task_input`` pulls them, in
    attempts of :data:`PULL_ATTEMPT_S` (its objects may still be on their way to the node)
    for as long as the node still holds the task: when the node gave the message up (its
    run was stopped while it arrived), the task is gone and the worker moves on instead of
    waiting for objects that will never come."""
    from flwr.supercore.inflatable.inflatable_utils import ObjectPullError
    from flwr.supernode.runtime.run_clientapp import pull_task_input

    while True:
        try:
            message, context, run, _ = pull_task_input(client)
            return message, context, run
        except ObjectPullError:
            if not alive():
                raise


def runtime_address(host: str, port: int) -> str:
    """Where this machine's worker reaches its node's Runtime API."""
    return f"127.0.0.1:{port}" if host in ("0.0.0.0", "") else f"{host}:{port}"


def run_warm_node(command: list[str], address: str, state_prefix: str) -> NoReturn:
    """Run the SuperNode of ``command`` (a ``flower-supernode`` command line with
    ``--isolation process``) in this process with a :class:`WarmWorker` beside it;
    returns only by exiting, as ``flower-supernode`` does."""
    require_flwr()
    flower_environment(os.environ, prefix=state_prefix, state_keys=("FLWR_HOME",))
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    LOG.addHandler(handler)
    LOG.setLevel(logging.INFO)
    LOG.propagate = False
    sleeps = shorten_flower_waits()
    worker = WarmWorker(address, wake=sleeps.message_waiting, dropped=guard_dropped_runs())
    threading.Thread(target=worker.run, name="regionfed-warm-worker", daemon=True).start()
    from flwr.supernode.cli.flower_supernode import flower_supernode

    sys.argv = [os.path.basename(command[0]), *command[1:]]
    flower_supernode()
    sys.exit(0)
