"""Strategy messages survive the trip through Flower records unchanged."""

import math

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from regionfed.algorithms.base import ClientResult, TrainInstruction  # noqa: E402
from regionfed.errors import DataError  # noqa: E402
from regionfed.runtime.flower.codec import (  # noqa: E402
    decode_instruction,
    decode_result,
    encode_instruction,
    encode_result,
)


def test_instruction_round_trip_keeps_tensors_arrays_and_plain_values():
    control = torch.randn(5, dtype=torch.float64)
    ins = TrainInstruction("u7", "eu", torch.randn(5), {"epochs": 2, "score": True,
                                                         "control": control,
                                                         "hist": np.arange(3)}, "train")
    back = decode_instruction(encode_instruction(ins))
    assert (back.client_id, back.region, back.kind) == ("u7", "eu", "train")
    assert torch.equal(back.params, ins.params) and back.params.dtype == torch.float32
    assert back.config["epochs"] == 2 and back.config["score"] is True
    assert torch.equal(back.config["control"], control)
    assert back.config["control"].dtype == torch.float64
    assert isinstance(back.config["hist"], np.ndarray)
    assert back.config["hist"].tolist() == [0, 1, 2]


def test_result_round_trip_with_and_without_update():
    res = ClientResult("u1", "us", torch.arange(4.0), 12,
                       {"train_loss": 0.5, "counts": np.array([1, 0, 3])})
    back = decode_result(encode_result(res))
    assert torch.equal(back.update, res.update) and back.num_examples == 12
    assert back.metrics["train_loss"] == 0.5 and back.metrics["counts"].tolist() == [1, 0, 3]
    empty = decode_result(encode_result(ClientResult("u1", "us", None, 3, {"loss_sum": 1.0})))
    assert empty.update is None and empty.metrics == {"loss_sum": 1.0}


def test_unserialisable_values_are_a_clear_error():
    with pytest.raises(DataError, match="cannot be sent over Flower"):
        encode_instruction(TrainInstruction("u", "r", torch.zeros(1), {"f": object()}))
    with pytest.raises(DataError, match="cannot be sent over Flower"):
        encode_result(ClientResult("u", "r", None, 1, {"x": object()}))


def test_a_nan_metric_reaches_the_server_which_rejects_the_reply():
    decoded = decode_result(encode_result(ClientResult("u", "r", None, 1,
                                                       {"train_loss": float("nan")})))
    assert math.isnan(decoded.metrics["train_loss"])
