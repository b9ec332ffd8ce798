"""Strategy messages ⇄ Flower records, losslessly.

A :class:`~regionfed.algorithms.base.TrainInstruction` or
:class:`~regionfed.algorithms.base.ClientResult` becomes a ``RecordDict`` with

* ``arrays`` (``ArrayRecord``): the parameter vector / update, and every tensor or array
  found among the config or metric values (keyed ``config.<key>`` / ``metrics.<key>``);
* ``meta`` (``ConfigRecord``): kind, client id, region, example count, and the remaining
  JSON-serialisable config or metrics as one JSON string (Flower records reject nested
  mappings and ``None``), plus which keys were torch tensors and which numpy arrays.

Decoding returns the same objects (torch tensors as torch, numpy arrays as numpy), so a
strategy's client step sees exactly what it would in-process.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from regionfed.algorithms.base import ClientResult, TrainInstruction
from regionfed.errors import DataError


def _records():
    from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

    return Array, ArrayRecord, ConfigRecord, RecordDict


def pack_values(values: dict[str, Any], prefix: str, arrays: dict[str, Any]
                ) -> dict[str, Any]:
    """Move the tensors/arrays of ``values`` into ``arrays`` (as ``prefix.key``); return the
    JSON-able rest plus which keys were torch tensors and which numpy arrays."""
    Array = _records()[0]
    rest: dict[str, Any] = {}
    torch_keys, numpy_keys = [], []
    for key, value in values.items():
        if isinstance(value, torch.Tensor):
            arrays[f"{prefix}.{key}"] = Array(value.detach().cpu().contiguous().numpy())
            torch_keys.append(key)
        elif isinstance(value, np.ndarray):
            arrays[f"{prefix}.{key}"] = Array(np.ascontiguousarray(value))
            numpy_keys.append(key)
        else:
            rest[key] = value
    return {"values": rest, "torch": torch_keys, "numpy": numpy_keys}


def unpack_values(packed: dict[str, Any], prefix: str, arrays: Any) -> dict[str, Any]:
    """The inverse of :func:`pack_values`."""
    out = dict(packed["values"])
    for key in packed["torch"]:
        out[key] = torch.from_numpy(arrays[f"{prefix}.{key}"].numpy().copy())
    for key in packed["numpy"]:
        out[key] = arrays[f"{prefix}.{key}"].numpy().copy()
    return out


def _json(value: Any, what: str, allow_nan: bool = False) -> str:
    try:
        return json.dumps(value, allow_nan=allow_nan)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{what} cannot be sent over Flower ({exc})") from None


def encode_instruction(instruction: TrainInstruction):  # -> RecordDict
    _, ArrayRecord, ConfigRecord, RecordDict = _records()
    Array = _records()[0]
    arrays = {"params": Array(instruction.params.detach().cpu().contiguous().numpy())}
    config = pack_values(instruction.config, "config", arrays)
    meta = ConfigRecord({"kind": instruction.kind, "client_id": instruction.client_id,
                         "region": instruction.region,
                         "config": _json(config, f"the config of a {instruction.kind!r} "
                                                 "instruction")})
    return RecordDict({"arrays": ArrayRecord(array_dict=arrays), "meta": meta})


def decode_instruction(content: Any) -> TrainInstruction:
    arrays, meta = content["arrays"], content["meta"]
    config = unpack_values(json.loads(meta["config"]), "config", arrays)
    return TrainInstruction(str(meta["client_id"]), str(meta["region"]),
                            torch.from_numpy(arrays["params"].numpy().copy()), config,
                            str(meta["kind"]))


def encode_result(result: ClientResult):  # -> RecordDict
    Array, ArrayRecord, ConfigRecord, RecordDict = _records()
    arrays: dict[str, Any] = {}
    if result.update is not None:
        arrays["update"] = Array(result.update.detach().cpu().contiguous().numpy())
    metrics = pack_values(result.metrics, "metrics", arrays)
    meta = ConfigRecord({"client_id": result.client_id, "region": result.region,
                         "num_examples": int(result.num_examples),
                         "has_update": result.update is not None,
                         # a diverged client's NaN loss must reach the server, which
                         # rejects the reply (faults.rejection_reason) instead of the node
                         # failing the whole run
                         "metrics": _json(metrics, "a client result's metrics",
                                          allow_nan=True)})
    return RecordDict({"arrays": ArrayRecord(array_dict=arrays), "meta": meta})


def decode_result(content: Any) -> ClientResult:
    arrays, meta = content["arrays"], content["meta"]
    update = torch.from_numpy(arrays["update"].numpy().copy()) if meta["has_update"] \
        else None
    return ClientResult(str(meta["client_id"]), str(meta["region"]), update,
                        int(meta["num_examples"]),
                        unpack_values(json.loads(meta["metrics"]), "metrics", arrays))


# -- the legacy FitIns / FitRes a SecAgg+ exchange carries (runtime.flower.secagg) ---------
def encode_fit_ins(instruction: TrainInstruction):  # -> flwr.common.FitIns
    """An update-producing instruction as the ``FitIns`` flwr's SecAgg+ workflow sends:
    the parameter vector and any config arrays as its parameters, the rest as JSON."""
    from flwr.common import FitIns, ndarrays_to_parameters

    arrays: dict[str, Any] = {}
    config = pack_values(instruction.config, "config", arrays)
    names = list(arrays)
    tensors = [instruction.params.detach().cpu().contiguous().numpy()]
    tensors += [arrays[name].numpy() for name in names]
    meta = {"kind": instruction.kind, "client_id": instruction.client_id,
            "region": instruction.region, "config": config, "arrays": names}
    return FitIns(ndarrays_to_parameters(tensors),
                  {"regionfed": _json(meta, f"the config of a {instruction.kind!r} "
                                            "instruction")})


def decode_fit_ins(fit_ins: Any) -> TrainInstruction:
    from flwr.common import Array, parameters_to_ndarrays

    meta = json.loads(str(fit_ins.config["regionfed"]))
    params, *rest = parameters_to_ndarrays(fit_ins.parameters)
    arrays = {name: Array(np.ascontiguousarray(a)) for name, a in zip(meta["arrays"], rest,
                                                                        strict=True)}
    return TrainInstruction(str(meta["client_id"]), str(meta["region"]),
                            torch.from_numpy(params.copy()),
                            unpack_values(meta["config"], "config", arrays), str(meta["kind"]))


def encode_fit_res(result: ClientResult):  # -> flwr.common.FitRes
    """A client result as the ``FitRes`` whose parameters SecAgg+ masks (the update) and
    whose metrics travel in plain (numbers only: a tensor metric would bypass the
    masking, so it is refused)."""
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters

    if result.update is None:
        raise DataError(f"client {result.client_id} returned no update to aggregate "
                        "securely")
    arrays: dict[str, Any] = {}
    metrics = pack_values(result.metrics, "metrics", arrays)
    if arrays:
        raise DataError(f"client {result.client_id}: metrics {', '.join(arrays)} are "
                        "tensors, which secure aggregation cannot carry")
    update = result.update.detach().cpu().contiguous().numpy()
    return FitRes(Status(Code.OK, ""), ndarrays_to_parameters([update]),
                  int(result.num_examples),
                  {"regionfed": _json(metrics, "a client result's metrics", allow_nan=True)})


def fit_res_metrics(fit_res: Any) -> dict[str, Any]:
    """The metrics :func:`encode_fit_res` put in a ``FitRes``."""
    return dict(json.loads(str(fit_res.metrics["regionfed"]))["values"])
