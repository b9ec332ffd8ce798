"""The command lines that start a Flower SuperLink and a regionfed SuperNode
(``regionfed flower superlink`` / ``regionfed flower node``), with the flags found necessary
(docs/flower.md): one HTTP port per process, no runtime dependency installation, node
configs as quoted TOML strings, and Flower state out of ``$HOME``; and
:class:`LocalDeployment`, a whole Deployment Engine on this machine.

These start insecure (plain-text) connections, for loopback and trusted networks; for TLS
run ``flower-superlink`` / ``flower-supernode`` yourself with the same ``--node-config``
(``--print-command`` shows it).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from regionfed.errors import ConfigError, DeploymentError
from regionfed.runtime.flower import flower_environment, require_flwr
from regionfed.runtime.flower.deployment import flower_executable, toml_string
from regionfed.runtime.threads import usable_cores


def check_port(port: int, what: str) -> int:
    if not 0 < port < 65536:
        raise ConfigError(f"{what}: port {port} is not in 1..65535")
    return port


def superlink_command(host: str = "127.0.0.1", port: int = 9093) -> list[str]:
    """``flower-superlink`` serving every API on ``host:port``; it never installs an app's
    dependencies (regionfed must be installed where it runs)."""
    return [flower_executable("flower-superlink"), "--insecure", "--host", host,
            "--port", str(check_port(port, "--port")),
            "--disable-runtime-dependency-installation"]


def node_config(region: str, client_index: int = 0, data: str | None = None) -> str:
    """The ``--node-config`` value of a node holding client ``client_index`` of ``region``
    (:mod:`regionfed.runtime.flower.node`)."""
    if not region:
        raise ConfigError("--region must not be empty")
    if client_index < 0:
        raise ConfigError(f"--client-index must be ≥ 0, got {client_index}")
    items = [f"region={toml_string(region)}", f"client-index={int(client_index)}"]
    if data is not None:
        if not os.path.exists(data):
            raise ConfigError(f"--data: file not found: {data}")
        items.append(f"data-path={toml_string(os.path.abspath(data))}")
    return " ".join(items)


#: how a node runs its client's messages: ``warm`` (one process for all of them,
#: :mod:`regionfed.runtime.flower.warm`) or ``fresh`` (Flower's default: a new
#: ``flwr-clientapp`` process per message)
WORKERS = ("warm", "fresh")


def check_worker(worker: str, what: str = "--worker") -> str:
    if worker not in WORKERS:
        raise ConfigError(f"{what} must be one of {', '.join(WORKERS)}, got {worker!r}")
    return worker


def supernode_command(superlink: str, region: str, client_index: int = 0,
                      data: str | None = None, host: str = "127.0.0.1", port: int = 9094,
                      worker: str = "fresh") -> list[str]:
    """``flower-supernode`` connected to ``superlink`` (HOST:PORT), holding one client;
    for a ``warm`` worker it starts no SuperExec (``--isolation process``): the warm
    worker takes its place."""
    from regionfed.config import build_config

    check_worker(worker)
    build_config({"flower": {"superlink": superlink}})  # HOST:PORT, or a clear error
    return [flower_executable("flower-supernode"), "--insecure", "--superlink", superlink,
            "--host", host, "--port", str(check_port(port, "--port")),
            "--node-config", node_config(region, client_index, data),
            *(["--isolation", "process"] if worker == "warm" else [])]


def exec_flower(command: list[str], state_prefix: str) -> NoReturn:
    """Replace this process by ``command`` (so its PID is the Flower process's), with the
    quiet environment and a private ``FLWR_HOME`` unless one is set."""
    require_flwr()
    env = flower_environment(dict(os.environ), prefix=state_prefix, state_keys=("FLWR_HOME",))
    os.execve(command[0], command, env)


# -- a whole Deployment Engine on this machine (tests, benchmarks, a first try) ------------
def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports nothing listens on (asked from the OS, then checked)."""
    held = []
    for _ in range(count):
        s = socket.socket()
        s.bind((host, 0))
        held.append(s)
    ports = [s.getsockname()[1] for s in held]
    for s in held:
        s.close()
    for port in ports:
        if not port_is_free(port, host):
            raise DeploymentError(f"port {port} on {host} is already in use")
    return ports


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as probe:
        return probe.connect_ex((host, port)) != 0


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    """Poll ``condition`` until it holds; a :class:`DeploymentError` naming ``what`` after
    ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    raise DeploymentError(f"{what} within {seconds:g} s")


def superlink_is_healthy(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


class LocalDeployment:
    """A SuperLink and one SuperNode per ``(region, client_index)`` on 127.0.0.1, each
    started with ``regionfed flower …`` in its own session, logging to ``folder``; the
    nodes run their messages in a ``warm`` worker (default) or ``fresh`` processes.

    Ports are checked before use, every wait is bounded, and :meth:`stop` (also on leaving
    the ``with`` block, whatever happened) terminates every process group by PID — the
    ``flower-superexec`` children included — and kills what is left after ``grace_s``.
    """

    def __init__(self, nodes: list[tuple[str, int]], folder: str | Path,
                 start_timeout_s: float = 90.0, grace_s: float = 10.0,
                 worker: str = "warm") -> None:
        self.nodes, self.folder = list(nodes), Path(folder)
        self.worker = check_worker(worker, "worker")
        self.start_timeout_s, self.grace_s = start_timeout_s, grace_s
        self.processes: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self.address = ""

    def __enter__(self) -> LocalDeployment:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        """Start everything; the SuperLink's address once every node has registered."""
        self.folder.mkdir(parents=True, exist_ok=True)
        link_port, *node_ports = free_ports(1 + len(self.nodes))
        link_log = self._start("superlink", "superlink", "--port", str(link_port))
        wait_for(lambda: self._alive() and superlink_is_healthy(link_port),
                 self.start_timeout_s, "the SuperLink did not answer /health")
        self.address = f"127.0.0.1:{link_port}"
        for (region, index), port in zip(self.nodes, node_ports, strict=True):
            self._start(f"node-{region}-{index}", "node", "--superlink", self.address,
                        "--region", region, "--client-index", str(index),
                        "--port", str(port), "--worker", self.worker)
        wait_for(lambda: self._alive()
                 and link_log.read_text().count("Activated node_id") >= len(self.nodes),
                 self.start_timeout_s, f"{len(self.nodes)} SuperNodes did not register")
        return self.address

    def _alive(self) -> bool:
        """True while every started process runs; a :class:`DeploymentError` with the end
        of its log as soon as one has exited."""
        for process, log in zip(self.processes, self.logs, strict=True):
            if process.poll() is not None:
                lines = [x for x in log.read_text().splitlines() if x.strip()]
                raise DeploymentError(f"{log.stem} exited with status {process.returncode}: "
                                      f"{lines[-1] if lines else 'no output'} (log: {log})")
        return True

    def _start(self, name: str, *args: str) -> Path:
        home = self.folder / f"{name}-home"
        home.mkdir(exist_ok=True)
        log = self.folder / f"{name}.log"
        env = {**os.environ, "FLWR_HOME": str(home)}
        if args[0] == "node":  # the nodes share this machine's cores (unless told otherwise)
            env.setdefault("OMP_NUM_THREADS",
                           str(max(1, len(usable_cores()) // len(self.nodes))))
        with open(log, "w") as out:
            self.processes.append(subprocess.Popen(
                [sys.executable, "-m", "regionfed", "flower", *args], stdout=out,
                stderr=subprocess.STDOUT, env=env, start_new_session=True))
        self.logs.append(log)
        return log

    def stop(self) -> None:
        for process in self.processes:
            _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for process in self.processes:  # survivors, and any superexec children
            _signal_group(process.pid, signal.SIGKILL)
            try:
                process.wait(timeout=self.grace_s)
            except subprocess.TimeoutExpired:
                pass
        # the children die (and are reaped) a moment after their group leader
        groups = [p.pid for p in self.processes]
        try:
            wait_for(lambda: not any(map(_group_exists, groups)), self.grace_s,
                     "Flower processes were still running after SIGKILL")
        finally:
            self.processes, self.logs = [], []


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
