"""The node side without a Flower process: which client a node holds, its private state
across messages, and the strategy's own client step behind a message."""

import pytest
import torch

pytest.importorskip("flwr")

from regionfed.algorithms.base import TrainInstruction  # noqa: E402
from regionfed.config import build_config  # noqa: E402
from regionfed.errors import ConfigError, DataError  # noqa: E402
from regionfed.runtime.flower.codec import decode_result, encode_instruction  # noqa: E402
from regionfed.runtime.flower.node import (  # noqa: E402
    build_node,
    client_index,
    restore_client_state,
    save_client_state,
)

CONFIG = build_config({"data": {"num_queries": 480, "num_regions": 2, "clients_per_region": 2,
                                "vocab_size": 1000},
                       "model": {"dim": 32, "heads": 2, "ngram_buckets": 512},
                       "training": {"rounds": 1}})
RUN = {"regionfed-config": CONFIG.to_yaml(), "method": "fedavg", "seed": 0}


def test_node_config_selects_the_client():
    node = build_node(RUN, {"partition-id": 3})
    federation = node.federation
    assert client_index(federation, {"partition-id": 3}) == 3
    second_region = federation.regions[1]
    first_of_second = next(i for i, c in enumerate(federation.clients)
                           if c.region == second_region)
    assert client_index(federation, {"region": second_region}) == first_of_second
    assert client_index(federation, {"region": second_region, "client-index": 1}) == \
        first_of_second + 1
    with pytest.raises(DataError, match="not a region"):
        client_index(federation, {"region": "atlantis"})
    with pytest.raises(DataError, match="client-index 5"):
        client_index(federation, {"region": second_region, "client-index": 5})
    with pytest.raises(ConfigError, match="node config"):
        client_index(federation, {})
    with pytest.raises(ConfigError, match="lacks"):
        build_node({"method": "fedavg"}, {"partition-id": 0})


def test_private_state_survives_between_messages():
    from flwr.app import RecordDict

    node = build_node(RUN, {"partition-id": 0})
    node.client.state = {"personal": torch.arange(3.0), "steps": 4}
    node.client.train_calls = {"main": 2}
    state = RecordDict()
    save_client_state(node, state)
    node.client.state, node.client.train_calls = {}, {}
    restore_client_state(node, state)
    assert torch.equal(node.client.state["personal"], torch.arange(3.0))
    assert node.client.state["steps"] == 4 and node.client.train_calls == {"main": 2}


def test_a_train_message_runs_the_strategys_client_step():
    from flwr.app import RecordDict

    from regionfed.runtime.flower.node import handle_instruction
    from regionfed.runtime.params import get_flat

    node = build_node(RUN, {"partition-id": 1})
    start = get_flat(node.task.build_model(0))
    ins = TrainInstruction(node.client.client_id, node.client.region, start)
    state = RecordDict()
    result = decode_result(handle_instruction(node, encode_instruction(ins), state))
    assert result.update.shape == start.shape and torch.isfinite(result.update).all()
    assert result.update.abs().sum() > 0 and "train_loss" in result.metrics
    restore_client_state(node, state)
    assert node.client.train_calls == {"main": 1}  # the next round shuffles differently
    other = TrainInstruction("someone-else", node.client.region, start)
    with pytest.raises(DataError, match="reached the node"):
        handle_instruction(node, encode_instruction(other), state)


def test_a_client_personalized_model_is_evaluated_on_its_node():
    """Ditto's personal model never leaves the node: the server sends the global model, the
    node scores the client's own personal model (as the in-process simulator does)."""
    from flwr.app import RecordDict

    from regionfed.runtime.flower.node import (
        evaluation_counts,
        handle_instruction,
        score_counts,
    )
    from regionfed.runtime.params import get_flat

    node = build_node({**RUN, "method": "ditto"}, {"partition-id": 2})
    start = get_flat(node.task.build_model(0))
    state = RecordDict()
    handle_instruction(node, encode_instruction(
        TrainInstruction(node.client.client_id, node.client.region, start)), state)
    node.client.state = {}  # a fresh process: only context.state holds the personal model
    counts = evaluation_counts(node, start, "val", True, state)
    personal = node.client.state["personal"]
    assert not torch.equal(personal, start)
    assert counts == score_counts(node, personal, "val")
    assert evaluation_counts(node, start, "val", False, state) == score_counts(node, start,
                                                                               "val")


def _plus_node_with_an_untrained_personal_model(**plus_settings):
    """A regionfed-plus node (no refresh before an evaluation, plus ``plus_settings``) whose
    kept personal model is the untrained start; returns (node, start, a model trained on
    this client, the node's saved state)."""
    from flwr.app import RecordDict

    from regionfed.runtime.params import get_flat

    plus = CONFIG.regionfed_plus.model_copy(update={"personal_refresh_epochs": 0,
                                                    **plus_settings})
    config = CONFIG.model_copy(update={"regionfed_plus": plus})
    node = build_node({**RUN, "regionfed-config": config.to_yaml(), "method": "regionfed-plus"},
                      {"partition-id": 1})
    start = get_flat(node.task.build_model(0))
    trained, _ = node.client.train(start, epochs=2)
    state = RecordDict()
    node.client.state = {"personal": start.clone()}
    save_client_state(node, state)
    return node, start, trained, state


def test_a_two_level_client_on_its_node_chooses_with_the_regional_model_it_was_sent():
    """regionfed-plus on a node: the regional model comes with the evaluation request (the
    node holds no server state). Global and personal models untrained, the regional one
    trained on this client: the regional model is scored (without the request's regional
    model the node would have only untrained candidates). The personal model as last
    trained (no refresh from the regional model before the evaluation): the regional model
    is the choice's default."""
    from regionfed.runtime.flower.node import evaluation_counts, score_counts

    node, start, trained, state = _plus_node_with_an_untrained_personal_model()
    counts = evaluation_counts(node, start, "val", True, state, {"regional": trained})
    assert counts == score_counts(node, trained, "val")
    assert score_counts(node, trained, "val") != score_counts(node, start, "val")


def test_a_node_sent_an_all_noise_anchor_evaluates_with_the_kept_personal_model():
    """regionfed-plus with ``noise_aware_anchor``: the anchor share comes with the evaluation
    request; sent 0 (θ_r shows no signal over its DP noise) the server's models are not
    candidates, so without a refresh the node scores the kept personal model; sent more it
    chooses as usual (here: the trained regional model)."""
    import torch

    from regionfed.runtime.flower.node import evaluation_counts, score_counts

    node, start, trained, state = _plus_node_with_an_untrained_personal_model(
        noise_aware_anchor=True)
    for share, scored in ((0.0, start), (0.5, trained)):
        arrays = {"regional": trained, "anchor_share": torch.tensor([share], dtype=torch.float64)}
        counts = evaluation_counts(node, start, "val", True, state, arrays)
        assert counts == score_counts(node, scored, "val")
