"""The client side on a Flower node: one client's data, the strategy's client step.

A node holds one client of the run's benchmark, chosen by its node config:

* simulation runtime: ``partition-id`` = the client's index in the federation (its region
  follows from the federation: partition → region); under ``regionfed audit`` the
  partitions after the federation's clients are the inserted canaries of the run config's
  ``regionfed-canaries`` layout (:mod:`regionfed.runtime.canaries`);
* Deployment Engine: ``region="eu"`` and ``client-index=k`` (the k-th client of that region;
  default 0), optionally ``data-path="…"``: this machine's copy of the dataset file (it
  replaces the run's ``data.path``; every node must read the same file content, because the
  nodes and the server rebuild the same federation from it).

The node rebuilds the federation and the task from the run's configuration (deterministic in
its seeds, so every node and the server agree), wraps its client in the same
:class:`~regionfed.runtime.simulator.SimulatedClient` the in-process simulator uses, and runs
:meth:`Strategy.handle` on each instruction — the strategy's own client code, unchanged. The
client's private state (and its shuffling-stream counters) lives in Flower's
``context.state`` between messages, because a Deployment-Engine node may run each message in
a fresh process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from regionfed.algorithms.base import ClientResult, Strategy, TrainInstruction, check_finite
from regionfed.config import RunConfig, TrainingConfig, build_config, parse_yaml
from regionfed.data.federation import ClientData, Federation
from regionfed.errors import ConfigError, DataError
from regionfed.models.tasks import Task
from regionfed.runtime.canaries import CanaryClient, CanaryLayout
from regionfed.runtime.flower.codec import (
    pack_values,
    unpack_values,
)
from regionfed.runtime.params import num_parameters, set_flat
from regionfed.runtime.simulator import SimulatedClient

#: run-config keys (Flower run config values must be scalars)
CONFIG_KEY, METHOD_KEY, SEED_KEY = "regionfed-config", "method", "seed"
CANARIES_KEY = "regionfed-canaries"
STATE_KEY = "regionfed-client"


@dataclass
class NodeRunner:
    """What :class:`SimulatedClient` needs from its host (the simulator's counterpart)."""

    task: Task
    model: nn.Module
    training: TrainingConfig
    seed: int


@dataclass
class Node:
    config: RunConfig
    federation: Federation
    task: Task
    strategy: Strategy
    client: SimulatedClient | CanaryClient

    @property
    def is_canary(self) -> bool:
        return isinstance(self.client, CanaryClient)


#: nodes built in this process, newest last: a warm node process serves run after run,
#: so only the last few are kept
_CACHE: dict[tuple[str, str, int, int, str], Node] = {}
CACHED_RUNS = 4


def run_settings(run_config: dict[str, Any]) -> tuple[str, str, int]:
    """(config YAML, method, seed) from a Flower run config, with clear errors."""
    missing = [k for k in (CONFIG_KEY, METHOD_KEY, SEED_KEY) if k not in run_config]
    if missing:
        raise ConfigError(f"the Flower run config lacks {', '.join(missing)}")
    return str(run_config[CONFIG_KEY]), str(run_config[METHOD_KEY]), int(run_config[SEED_KEY])


def load_run_config(text: str) -> RunConfig:
    return build_config(parse_yaml(text))


def client_index(federation: Federation, node_config: dict[str, Any], canaries: int = 0
                 ) -> int:
    """The federation index of this node's client (module docstring); a simulation
    partition may also be one of ``canaries`` canaries after the clients."""
    if "region" in node_config:
        region = str(node_config["region"])
        members = [i for i, c in enumerate(federation.clients) if c.region == region]
        if not members:
            raise DataError(f"node region {region!r} is not a region of this federation "
                            f"({', '.join(federation.regions)})")
        k = int(node_config.get("client-index", 0))
        if not 0 <= k < len(members):
            raise DataError(f"node client-index {k}: region {region!r} has {len(members)} "
                            "clients")
        return members[k]
    if "partition-id" in node_config:
        index = int(node_config["partition-id"])
        if not 0 <= index < len(federation.clients) + canaries:
            raise DataError(f"partition-id {index}: the federation has "
                            f"{len(federation.clients)} clients"
                            + (f" and {canaries} canaries" if canaries else ""))
        return index
    raise ConfigError("a regionfed node needs region=\"…\" (and client-index) or a "
                      "partition-id in its node config")


def with_node_data(config: RunConfig, node_config: dict[str, Any]) -> RunConfig:
    """``config`` with ``data.path`` replaced by the node's ``data-path`` (if it has one)."""
    if "data-path" not in node_config:
        return config
    if "path" not in type(config.data).model_fields:
        raise ConfigError(f"node data-path: dataset {config.dataset} is generated, it reads "
                          "no data file")
    data = config.data.model_copy(update={"path": str(node_config["data-path"])})
    return config.model_copy(update={"data": data})


def build_node(run_config: dict[str, Any], node_config: dict[str, Any]) -> Node:
    """This node's federation, task, strategy and client (cached per process: a warm node
    builds them once per run)."""
    from regionfed.algorithms.registry import build_strategy
    from regionfed.data.registry import build_federation
    from regionfed.models.registry import build_task

    text, method, seed = run_settings(run_config)
    config = with_node_data(load_run_config(text), node_config)
    federation = build_federation(config.dataset, config.data)
    layout = (CanaryLayout.from_json(str(run_config[CANARIES_KEY]))
              if run_config.get(CANARIES_KEY) else None)
    index = client_index(federation, node_config,
                         len(layout.indices) if layout is not None else 0)
    key = (text, method, seed, index, str(run_config.get(CANARIES_KEY) or ""))
    if key in _CACHE:
        return _CACHE[key]
    while len(_CACHE) >= CACHED_RUNS:
        del _CACHE[next(iter(_CACHE))]
    task = build_task(config.model, federation)
    model = task.build_model(seed)
    if layout is not None and index >= len(federation.clients):
        canary = layout.client(index - len(federation.clients),
                               num_parameters(model), task.num_classes,
                               config.training, index)
        _CACHE[key] = Node(config, federation, task, build_strategy(method, config), canary)
    else:
        data: ClientData = federation.clients[index]
        runner = NodeRunner(task, model, config.training, seed)
        client = SimulatedClient(data.client_id, data.region, index, len(data.train), data,
                                 task.prepare(data.train, training=True),
                                 task.prepare(data.val, training=False), runner)
        _CACHE[key] = Node(config, federation, task, build_strategy(method, config), client)
    return _CACHE[key]


def restore_client_state(node: Node, state: Any) -> None:
    """The client's private state and stream counters from ``context.state``."""
    if STATE_KEY + ".arrays" not in state:
        node.client.state, node.client.train_calls = {}, {}
        return
    meta = json.loads(state[STATE_KEY + ".meta"]["json"])
    node.client.state = unpack_values(meta["state"], "state", state[STATE_KEY + ".arrays"])
    node.client.train_calls = dict(meta["train_calls"])


def save_client_state(node: Node, state: Any) -> None:
    from flwr.app import ArrayRecord, ConfigRecord

    arrays: dict[str, Any] = {}
    packed = pack_values(node.client.state, "state", arrays)
    state[STATE_KEY + ".arrays"] = ArrayRecord(array_dict=arrays)
    state[STATE_KEY + ".meta"] = ConfigRecord({"json": json.dumps(
        {"state": packed, "train_calls": node.client.train_calls})})


def run_instruction(node: Node, instruction: TrainInstruction, state: Any) -> ClientResult:
    """The strategy's client step on this node's client, with its private state restored
    from and saved back to ``context.state``; the update checked finite."""
    if instruction.client_id != node.client.client_id:
        raise DataError(f"instruction for client {instruction.client_id!r} reached the node "
                        f"of {node.client.client_id!r}")
    restore_client_state(node, state)
    result = node.strategy.handle(instruction, node.client)
    if result.update is not None:
        check_finite(result.update, f"client {result.client_id}")
    save_client_state(node, state)
    return result


def handle_instruction(node: Node, content: Any, state: Any) -> Any:
    """Decode, run the strategy's client step, encode the reply."""
    from regionfed.runtime.flower.codec import decode_instruction, encode_result

    return encode_result(run_instruction(node, decode_instruction(content), state))


def handle_secure_instruction(node: Node, content: Any, state: Any) -> Any:
    """The same for the training step inside a SecAgg+ exchange
    (:mod:`regionfed.runtime.flower.secagg`): legacy ``FitIns`` in, ``FitRes`` out, whose
    update ``secaggplus_mod`` then quantizes and masks."""
    import flwr.compat.common.recorddict_compat as compat

    from regionfed.runtime.flower.codec import decode_fit_ins, encode_fit_res

    instruction = decode_fit_ins(compat.recorddict_to_fitins(content, keep_input=True))
    result = run_instruction(node, instruction, state)
    return compat.fitres_to_recorddict(encode_fit_res(result), keep_input=False)


def evaluation_counts(node: Node, params: torch.Tensor, split: str, on_client: bool,
                      state: Any, server_state: dict[str, torch.Tensor] | None = None
                      ) -> dict[str, float]:
    """Score this client on ``split``: with ``params``, or when ``on_client`` (a
    client-personalized strategy) with ``strategy.eval_params`` computed here from the
    global ``params``, the server state the request carries and the client's private
    state."""
    if on_client:
        restore_client_state(node, state)
        node.strategy.params = params
        node.strategy.receive_client_evaluation_arrays(node.client.region,
                                                       server_state or {})
        params = node.strategy.eval_params(node.client.client_id, node.client.region,
                                           node.client)
    return score_counts(node, params, split)


@torch.no_grad()
def score_counts(node: Node, params: torch.Tensor, split: str) -> dict[str, float]:
    """The additive metric statistics of ``params`` on this client's ``split``
    (:meth:`Task.score_counts`): what the server pools, instead of labels."""
    if node.is_canary:
        raise DataError(f"{node.client.client_id} is an audit canary: it holds no data to "
                        "score")
    dataset = node.client.data.split(split)
    model = set_flat(node.client.runner.model, params)
    return node.task.score_counts(node.task.predict(model, dataset), dataset)
