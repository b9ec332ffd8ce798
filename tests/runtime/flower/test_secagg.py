"""SecAgg+ per region (issue 29): flwr's protocol between the driver and regionfed's own
ClientApp, here over an in-process grid that delivers each message to a node's ClientApp
(each node with its own context, every message a serialized copy, as on the wire) — so a
node can be dropped at a chosen stage and everything the server receives can be looked at.
End to end on the Deployment Engine: tests/runtime/flower/test_deployment.py."""

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import Context, Message, RecordDict  # noqa: E402
from flwr.common.secure_aggregation.secaggplus_constants import (  # noqa: E402
    RECORD_KEY_CONFIGS,
    Key,
    Stage,
)

from regionfed.algorithms.base import TrainInstruction  # noqa: E402
from regionfed.config import build_config  # noqa: E402
from regionfed.data.registry import build_federation  # noqa: E402
from regionfed.models.registry import build_task  # noqa: E402
from regionfed.runtime.flower.app import make_client_app  # noqa: E402
from regionfed.runtime.flower.codec import encode_instruction  # noqa: E402
from regionfed.runtime.flower.secagg import secure_region_result  # noqa: E402
from regionfed.runtime.flower.server import INSTRUCTION_TYPE, decode_result, exchange  # noqa: E402
from regionfed.runtime.params import get_flat  # noqa: E402

CONFIG = {"data": {"num_queries": 480, "num_regions": 2, "clients_per_region": 4,
                   "vocab_size": 1000},
          "model": {"dim": 32, "heads": 2, "ngram_buckets": 512},
          "training": {"rounds": 1, "client_batching": "off",
                       "optimizer": {"name": "sgd", "lr": 0.1}}}


class InProcessGrid:
    """push/pull like a Flower grid; each message reaches its node's ClientApp as a
    serialized copy; ``drop(message) -> bool`` loses that node's reply."""

    def __init__(self, app, node_configs: dict[int, dict], drop=None) -> None:
        self.app, self.drop, self.pending = app, drop, {}
        self.contexts = {node: Context(run_id=0, node_id=node, node_config=cfg,
                                       state=RecordDict(), run_config={})
                         for node, cfg in node_configs.items()}

    def push_messages(self, messages):
        from flwr.common.serde import recorddict_from_proto, recorddict_to_proto

        ids = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = message.object_id
            copy = Message(recorddict_from_proto(recorddict_to_proto(message.content)),
                           dst_node_id=message.metadata.dst_node_id,
                           message_type=message.metadata.message_type)
            copy.metadata.__dict__["_message_id"] = message.metadata.message_id
            reply = self.app(message=copy, context=self.contexts[message.metadata.dst_node_id])
            if self.drop is None or not self.drop(message):
                self.pending[message.metadata.message_id] = reply
            ids.append(message.metadata.message_id)
        return ids

    def pull_messages(self, ids):
        return [self.pending.pop(i) for i in list(ids) if i in self.pending]


@pytest.fixture(scope="module")
def region():
    """(config, ClientApp, node ids by client, node configs, the first region's
    instructions, example counts by client): 4 clients, each on its own node."""
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 0, 1, 0
    config = build_config(CONFIG)
    federation = build_federation(config.dataset, config.data)
    params = get_flat(build_task(config.model, federation).build_model(0))
    app = make_client_app({"regionfed-config": config.to_yaml(), "method": "fedavg",
                           "seed": 0})
    node_of = {c.client_id: 100 + i for i, c in enumerate(federation.clients)}
    node_configs = {100 + i: {"partition-id": i} for i in range(len(federation.clients))}
    instructions = [TrainInstruction(c.client_id, c.region, params)
                    for c in federation.clients if c.region == federation.regions[0]]
    assert len(instructions) == 4
    counts = {c.client_id: len(c.train) for c in federation.clients}
    return config, app, node_of, node_configs, instructions, counts


def plain_results(region, instructions):
    config, app, node_of, node_configs, *_ = region
    grid = InProcessGrid(app, node_configs)
    replies = exchange(grid, [Message(encode_instruction(i), dst_node_id=node_of[i.client_id],
                                      message_type=INSTRUCTION_TYPE) for i in instructions],
                       60)
    return [decode_result(r.content) for r in replies]


def weighted_mean(results):
    total = sum(r.num_examples for r in results)
    return sum(r.update * r.num_examples for r in results) / total, total


def quantization_bound(results, settings):
    """SecAgg+'s worst-case error on the weighted mean: each client's w·Δ is rounded to
    a step of 2·clip/levels (w = n/max n), the sum divided by Σ w."""
    step = 2 * settings.clipping_range / settings.quantization_range
    largest = max(r.num_examples for r in results)
    return len(results) * step / sum(r.num_examples / largest for r in results) + 1e-7


def secure(region, instructions, drop=None, spy=None, settings=None):
    config, app, node_of, node_configs, _, counts = region
    grid = InProcessGrid(app, node_configs, drop)
    settings = settings or config.flower.secagg
    largest = max(counts[i.client_id] for i in instructions)  # as the driver asks
    # a dropped node's reply never comes: each stage waits 2 s for it
    return secure_region_result(lambda messages: exchange(grid, messages, 2.0), instructions,
                                node_of, float(largest), settings, 1, 2.0, spy)


def stage(message) -> str:
    return str(message.content.config_records[RECORD_KEY_CONFIGS][Key.STAGE])


def test_the_secure_regional_mean_is_the_plain_one_and_no_update_reaches_the_server(region):
    config, _, _, _, instructions, _ = region
    plain = plain_results(region, instructions)
    expected, total = weighted_mean(plain)
    received = []
    result, why = secure(region, instructions, spy=received.append)
    assert why is None and result.region == instructions[0].region
    assert result.num_examples == total
    error = float((result.update - expected).abs().max())
    assert error <= quantization_bound(plain, config.flower.secagg)
    assert error > 0  # it did go through quantization, not a plain path
    assert result.metrics["secagg_clients"] == 4
    assert result.metrics["train_loss"] == pytest.approx(
        sum(r.metrics["train_loss"] * r.num_examples for r in plain) / total, rel=1e-6)
    # the spy: 4 stages × 4 nodes, and nothing the server received is an update
    assert len(received) == 16
    updates = [r.update.numpy() for r in plain]
    for reply in received:
        assert all(len(record) == 0 for record in reply.content.array_records.values())
        for record in reply.content.config_records.values():
            for value in record.values():
                for item in value if isinstance(value, list) else [value]:
                    if isinstance(item, bytes) and len(item) >= 4 * updates[0].size:
                        vector = np.frombuffer(item[-4 * updates[0].size:], np.float32)
                        assert not any(np.allclose(vector, u, atol=1e-6) for u in updates)


def test_a_node_dropped_after_sharing_its_keys_is_tolerated(region):
    """Above the reconstruction threshold the region still releases: the mean of the
    clients that sent their masked update (the dropped one's masks removed)."""
    config, _, node_of, _, instructions, _ = region
    dropped = node_of[instructions[1].client_id]
    result, why = secure(region, instructions, drop=lambda m: (
        m.metadata.dst_node_id == dropped and stage(m) == Stage.COLLECT_MASKED_VECTORS))
    assert why is None
    others = [i for i in instructions if node_of[i.client_id] != dropped]
    plain = plain_results(region, others)
    expected, total = weighted_mean(plain)
    assert result.num_examples == total
    assert float((result.update - expected).abs().max()) <= quantization_bound(
        plain, config.flower.secagg)


def test_a_region_below_the_threshold_releases_nothing(region):
    _, _, node_of, _, instructions, _ = region
    kept = node_of[instructions[0].client_id]
    result, why = secure(region, instructions, drop=lambda m: (
        m.metadata.dst_node_id != kept and stage(m) == Stage.COLLECT_MASKED_VECTORS))
    assert result is None and "secure aggregation failed" in why


def test_a_region_with_too_few_sampled_clients_releases_nothing(region):
    _, _, _, _, instructions, _ = region
    result, why = secure(region, instructions[:2])
    assert result is None
    assert why == (f"region {instructions[0].region}: 2 sampled client(s), fewer than "
                   "flower.secagg.min_clients (3)")


def test_only_strategies_that_opted_in_run_with_secure_aggregation():
    from regionfed.algorithms.registry import build_strategy
    from regionfed.errors import ConfigError
    from regionfed.runtime.flower.secagg import check_secure_aggregation

    config = build_config(CONFIG)
    for method in ("fedavg", "regionfed-grad", "regionfed-interp"):
        check_secure_aggregation(build_strategy(method, config), config.dp)
    # opting in is not inherited: fedavg's subclasses use individual updates differently
    for method in ("scaffold", "ditto", "fedprox", "region-fedavg"):
        with pytest.raises(ConfigError, match="uses individual client updates"):
            check_secure_aggregation(build_strategy(method, config), config.dp)
    private = build_config({**CONFIG, "dp": {"mode": "user", "sigma": 1.0, "clip": 1.0}})
    with pytest.raises(ConfigError, match="with DP is not supported"):
        check_secure_aggregation(build_strategy("fedavg", private), private.dp)


def test_secure_aggregation_settings_are_validated():
    from regionfed.errors import ConfigError

    with pytest.raises(ConfigError, match="flower.secagg.min_clients"):
        build_config({"flower": {"secagg": {"enabled": True, "min_clients": 1}}})
    with pytest.raises(ConfigError, match="flower.secagg.quantization_range"):
        build_config({"flower": {"secagg": {"quantization_range": 2**30}}})
    with pytest.raises(ConfigError, match="flower.secagg.enable"):
        build_config({"flower": {"secagg": {"enable": True}}})
    with pytest.raises(ConfigError, match="runtime flower or flower-sim"):
        build_config({"flower": {"secagg": {"enabled": True}}})
    with pytest.raises(ConfigError, match="with DP is not supported"):
        build_config({"runtime": "flower-sim", "flower": {"secagg": {"enabled": True}},
                      "dp": {"mode": "user", "sigma": 1.0, "clip": 1.0}})


def test_the_cli_refuses_secure_aggregation_in_process(capsys):
    from regionfed.cli import main

    code = main(["run", "--methods", "fedavg", "--set", "flower.secagg.enabled=true",
                 "--quiet"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runtime flower or flower-sim" in err[0]


def test_fit_ins_and_fit_res_carry_instructions_and_results_losslessly():
    from regionfed.algorithms.base import ClientResult
    from regionfed.errors import DataError
    from regionfed.runtime.flower.codec import (
        decode_fit_ins,
        encode_fit_ins,
        encode_fit_res,
        fit_res_metrics,
    )

    instruction = TrainInstruction("c1", "eu", torch.arange(5.0),
                                   {"anchor": torch.ones(3), "steps": 4}, "gradient")
    back = decode_fit_ins(encode_fit_ins(instruction))
    assert (back.client_id, back.region, back.kind) == ("c1", "eu", "gradient")
    assert torch.equal(back.params, instruction.params)
    assert torch.equal(back.config["anchor"], torch.ones(3)) and back.config["steps"] == 4
    result = ClientResult("c1", "eu", torch.full((5,), 0.5), 7, {"train_loss": 1.25})
    fit_res = encode_fit_res(result)
    assert fit_res.num_examples == 7 and fit_res_metrics(fit_res) == {"train_loss": 1.25}
    with pytest.raises(DataError, match="tensors, which secure aggregation cannot carry"):
        encode_fit_res(ClientResult("c1", "eu", torch.zeros(5), 7, {"h": torch.ones(2)}))
    with pytest.raises(DataError, match="no update to aggregate securely"):
        encode_fit_res(ClientResult("c1", "eu", None, 7, {}))
