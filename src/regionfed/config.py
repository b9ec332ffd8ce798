"""Run configuration: typed, validated, YAML in and out.

Unknown keys, out-of-range values and unknown method names are rejected with a one-line
:class:`~regionfed.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from regionfed.algorithms.regionfed.config import RegionFedConfig, RegionFedPlusConfig
from regionfed.algorithms.registry import resolve_methods
from regionfed.data.esci import EsciConfig
from regionfed.data.esci_synth import EsciSynthConfig
from regionfed.data.femnist import FemnistConfig
from regionfed.data.reviews import ReviewsConfig
from regionfed.errors import ConfigError, config_error_from_validation, validation_messages
from regionfed.models.cnn import CNNConfig
from regionfed.models.minilm import MiniLMConfig
from regionfed.models.t5 import T5ModelConfig
from regionfed.models.tiny import TinyConfig
from regionfed.privacy.mechanism import DPConfig
from regionfed.runtime.local_training import OptimizerConfig
from regionfed.tuning import TuningConfig


class TrainingConfig(BaseModel):
    """Federated training budget and client optimisation (shared by every method)."""

    model_config = ConfigDict(extra="forbid")

    rounds: int = Field(20, ge=1)
    local_epochs: int = Field(1, ge=1)
    batch_size: int = Field(32, ge=1)
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    sample_rate: float = Field(1.0, gt=0, le=1)
    server_lr: float = Field(1.0, gt=0)
    eval_every: int = Field(5, ge=1)
    #: stop before the privacy budget is exceeded (rounds are cut to fit, docs/privacy.md)
    target_epsilon: float | None = Field(None, gt=0)
    #: train a round's clients as one batched (vmap) computation where the task and the
    #: strategy allow it: ``auto`` on a CPU with at least two torch threads (on one thread
    #: the sequential loop is faster), ``on`` wherever the model is (an accelerator too,
    #: until measurements make it the default there), ``off`` one by one; results agree to
    #: float tolerance; ``processes`` computes the clients' training and gradient calls in
    #: this process and spawned workers side by side, one torch thread each, with the
    #: sequential loop's own computation (CPU only; :mod:`regionfed.runtime.client_processes`)
    client_batching: Literal["auto", "on", "off", "processes"] = "auto"
    #: clients per batched computation (bounds memory: each holds its own parameters and
    #: optimizer state)
    max_batched_clients: int = Field(64, ge=1)
    #: examples per forward/backward pass when one client computes the mean gradient of
    #: its whole training split (``regionfed-meta``'s look-ahead gradient, APFL's α,
    #: SCAFFOLD option I): the same mean whatever the size (float summation order aside);
    #: larger is faster, smaller needs less memory. Batched clients use ``batch_size``
    gradient_batch_size: int = Field(256, ge=1)
    #: where models compute: cpu, cuda, cuda:N, or auto (a GPU when PyTorch sees one);
    #: strategies always hold CPU vectors (:mod:`regionfed.runtime.device`)
    device: str = Field("cpu", pattern=r"^(cpu|auto|cuda(:\d+)?)$")
    #: write a round checkpoint (``runs/<name>/state/``) every this many rounds, so
    #: ``--resume`` continues an interrupted method × seed from its last one; 0 = off
    checkpoint_every: int = Field(1, ge=0)
    #: per round, the probability that a client drops out (never answers) and that it
    #: straggles (computes, but answers after the deadline); in-process runtime
    #: (:mod:`regionfed.runtime.faults`)
    dropout: float = Field(0.0, ge=0.0, lt=1.0, allow_inf_nan=False)
    stragglers: float = Field(0.0, ge=0.0, lt=1.0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _someone_reports(self) -> TrainingConfig:
        if self.dropout + self.stragglers >= 1.0:
            raise ValueError("dropout + stragglers must be < 1 (someone has to report)")
        return self


class BaselinesConfig(BaseModel):
    """Key hyper-parameters of the baselines (paper §4.3; docs/baselines.md)."""

    model_config = ConfigDict(extra="forbid")

    #: FedProx proximal weight μ (Li et al., 2020, Eq. 2); 0 = FedAvg
    fedprox_mu: float = Field(0.01, ge=0.0)
    #: SCAFFOLD's control-variate update (Karimireddy et al., 2020, Alg. 1 line 12):
    #: "II" (default, from the local steps) or "I" (the gradient at the server model)
    scaffold_option: Literal["I", "II"] = "II"
    #: pFedMe (Dinh et al., 2020, Alg. 1): Moreau-envelope weight λ, inner steps K, the
    #: local-model step η (η·λ ≤ 1; default 1/λ) and the server mixing β
    pfedme_lambda: float = Field(15.0, gt=0)
    pfedme_inner_steps: int = Field(5, ge=1)
    pfedme_eta: float | None = Field(None, gt=0)
    pfedme_beta: float = Field(1.0, gt=0)
    #: Ditto's personal-objective weight λ (Li et al., 2021, Eq. 2); 0 = local training
    ditto_lambda: float = Field(0.1, ge=0.0)
    #: APFL's initial mixing weight α (Deng et al., 2020, Eq. 3); 0 + not adaptive = FedAvg
    apfl_alpha: float = Field(0.25, ge=0.0, le=1.0)
    #: APFL learns each client's α (Eq. 10)
    apfl_adaptive: bool = True
    #: FedBABU's fine-tuning epochs before evaluation (Oh et al., 2022, §4.2)
    fedbabu_finetune_epochs: int = Field(1, ge=0)
    #: FedAvg-FT: epochs each client fine-tunes the global model before it is evaluated,
    #: and the standard errors by which the global model must beat the fine-tuned one on
    #: the client's validation split (the rule of regionfed-plus's refreshed personal model)
    fedavg_ft_epochs: int = Field(8, ge=1)
    fedavg_ft_margin: float = Field(0.5, ge=0.0)
    #: FedRep's head epochs τ_h per round (Collins et al., 2021, Alg. 1)
    fedrep_head_epochs: int = Field(1, ge=1)
    #: FedTP: rank of the generated per-client Q/K/V deltas, hypernetwork sizes and step
    fedtp_rank: int = Field(4, ge=1)
    fedtp_embedding_dim: int = Field(16, ge=1)
    fedtp_hidden_dim: int = Field(64, ge=1)
    fedtp_hyper_lr: float = Field(1e-3, gt=0)


#: why SecAgg+ and DP are refused together (the config and the Flower driver both check)
SECAGG_WITH_DP = ("flower.secagg.enabled: secure aggregation with DP is not supported (the "
                  "server clips and noises individual updates); use dp.mode off")


class SecAggConfig(BaseModel):
    """SecAgg+ per region on the Flower runtimes (runtime/flower/secagg.py; docs/flower.md,
    "Secure aggregation")."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    #: a region releases nothing in a round with fewer sampled clients (with 2, each would
    #: learn the other's update from the mean)
    min_clients: int = Field(3, ge=2)
    #: shares of each client's secret, as a fraction of the region's sampled clients
    num_shares: float = Field(1.0, gt=0.0, le=1.0)
    #: shares needed to rebuild a secret, as a fraction of ``num_shares``: dropped clients
    #: are tolerated while this many of their neighbours answer
    reconstruction_threshold: float = Field(0.6, gt=0.0, le=1.0)
    #: every coordinate of an update is clipped to ±this before quantization
    clipping_range: float = Field(8.0, gt=0.0, allow_inf_nan=False)
    #: quantization levels over [−clipping_range, clipping_range] (≤ 2**26: the masked sum
    #: lives modulo 2**32)
    quantization_range: int = Field(2**22, ge=2**8, le=2**26)


class FlowerConfig(BaseModel):
    """Flower Deployment Engine settings (``runtime: flower``; docs/flower.md,
    "Many machines")."""

    model_config = ConfigDict(extra="forbid")

    #: the SuperLink's control address ``HOST:PORT`` (``flower-superlink --port``)
    superlink: str | None = None
    #: bound on one method × seed on the Deployment Engine, submission to result
    run_timeout_s: float = Field(3600.0, gt=0.0, allow_inf_nan=False)
    #: bound on waiting for the nodes' replies to one exchange
    reply_timeout_s: float = Field(600.0, gt=0.0, allow_inf_nan=False)
    #: a folder this machine and the SuperLink's both see (e.g. NFS), where the ServerApp
    #: writes the result; default: this machine's temp folder (a SuperLink on this machine)
    shared_dir: str | None = None
    #: SecAgg+ per region: the server sees each region's mean update, no client's
    secagg: SecAggConfig = Field(default_factory=SecAggConfig)

    @field_validator("superlink")
    @classmethod
    def _host_and_port(cls, value: str | None) -> str | None:
        if value is None:
            return value
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:9093), got {value!r}")
        return value


class RunConfig(BaseModel):
    """One experiment: a dataset, a model, a training budget and the methods to compare."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("default", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    dataset: Literal["esci-synth", "femnist", "esci", "reviews"] = "esci-synth"
    data: EsciSynthConfig | FemnistConfig | EsciConfig | ReviewsConfig = Field(
        default_factory=EsciSynthConfig)
    model: TinyConfig | CNNConfig | T5ModelConfig | MiniLMConfig = Field(
        default_factory=TinyConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    dp: DPConfig = Field(default_factory=lambda: DPConfig(mode="off"))
    regionfed: RegionFedConfig = Field(default_factory=RegionFedConfig)
    regionfed_plus: RegionFedPlusConfig = Field(default_factory=RegionFedPlusConfig)
    baselines: BaselinesConfig = Field(default_factory=BaselinesConfig)
    tuning: TuningConfig = Field(default_factory=TuningConfig)
    methods: list[str] = Field(
        default_factory=lambda: ["majority", "centralized", "centralized-rw", "local", "fedavg"])
    seeds: int = Field(1, ge=1)
    #: where federated methods run: the in-process simulator, Flower's simulation runtime
    #: (one SuperNode per client) or Flower's Deployment Engine (``flower.superlink``); the
    #: Flower runtimes need the flower extra
    runtime: Literal["inprocess", "flower-sim", "flower"] = "inprocess"
    flower: FlowerConfig = Field(default_factory=FlowerConfig)

    @model_validator(mode="before")
    @classmethod
    def _typed_sections(cls, values: Any) -> Any:
        """``data`` is read as the configuration of ``dataset``, ``model`` as the one its
        ``name`` picks (errors keep the section in the key path, e.g. ``data.path``)."""
        if not isinstance(values, dict):
            return values
        values = dict(values)
        model = values.get("model")
        name = model.get("name", "tiny") if isinstance(model, dict) else "tiny"
        if name not in MODEL_CONFIGS:
            raise ValueError(f"model.name: unknown model {name!r}; known: "
                             f"{', '.join(MODEL_CONFIGS)}")
        for key in ("data", "model"):
            schema = section_schema(values, key)
            raw = values.get(key)
            if schema is None or not isinstance(raw, dict | type(None)):
                continue  # unknown dataset/model names are reported by their own fields
            try:
                values[key] = schema.model_validate(raw or {})
            except ValidationError as exc:
                raise ValueError("; ".join(validation_messages(exc, f"{key}."))) from None
        return values

    @model_validator(mode="after")
    def _runtime_settings(self) -> RunConfig:
        if self.runtime == "flower" and self.flower.superlink is None:
            raise ValueError("runtime flower needs flower.superlink (HOST:PORT; CLI "
                             "--superlink)")
        if self.runtime != "inprocess" and (self.training.dropout or
                                            self.training.stragglers):
            raise ValueError("training.dropout and training.stragglers simulate faults in "
                             "the in-process runtime only")
        if self.runtime == "inprocess" and self.flower.secagg.enabled:
            raise ValueError("flower.secagg.enabled: secure aggregation runs between Flower "
                             "nodes (runtime flower or flower-sim), not in process")
        if self.flower.secagg.enabled and self.dp.mode != "off":
            raise ValueError(SECAGG_WITH_DP)
        return self

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def section_schema(values: dict[str, Any], key: str) -> type[BaseModel] | None:
    """The schema a run configuration's ``data`` / ``model`` section is read with: the one
    of its ``dataset``, the one its ``model.name`` picks (``None`` for an unknown name)."""
    if key == "data":
        return DATA_CONFIGS.get(values.get("dataset", "esci-synth"))
    model = values.get("model")
    return MODEL_CONFIGS.get(model.get("name", "tiny") if isinstance(model, dict) else "tiny")


DATA_CONFIGS: dict[str, type[BaseModel]] = {"esci-synth": EsciSynthConfig,
                                             "femnist": FemnistConfig,
                                             "esci": EsciConfig,
                                             "reviews": ReviewsConfig}
MODEL_CONFIGS: dict[str, type[BaseModel]] = {
    "tiny": TinyConfig, "t5-tiny": T5ModelConfig, "t5-small": T5ModelConfig,
    "minilm": MiniLMConfig, "cnn": CNNConfig}


def build_config(data: dict[str, Any] | None = None) -> RunConfig:
    """Validate a (possibly nested, partial) mapping into a :class:`RunConfig`."""
    try:
        config = RunConfig.model_validate(data or {})
    except ValidationError as exc:
        raise config_error_from_validation(exc) from None
    config.methods = resolve_methods(config.methods)
    return config


class _Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 booleans: only ``true``/``false`` are booleans.

    YAML 1.1 also reads ``off``/``on``/``yes``/``no`` as booleans, which turns
    ``dp.mode: off`` or ``client_batching: off`` into ``False``; boolean fields still accept
    those words, because pydantic reads the strings ``"off"``/``"on"``/… as booleans.
    """


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"))


def parse_yaml(text: str) -> Any:
    """YAML text (a config file, a ``--set`` value) as Python data, YAML 1.2 booleans."""
    return yaml.load(text, Loader=_Yaml12Loader)  # noqa: S506 - a SafeLoader subclass


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file into a mapping (validated later by :func:`build_config`)."""
    path = Path(path)
    try:
        raw = parse_yaml(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return raw


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """``set_dotted(d, "training.rounds", 3)`` sets ``d["training"]["rounds"] = 3``."""
    *parents, leaf = dotted.split(".")
    node = data
    for key in parents:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"config key {key!r} must be a mapping")
        node = child
    node[leaf] = value


def apply_set_overrides(data: dict[str, Any], items: list[str]) -> None:
    """Apply ``KEY=VALUE`` strings (``--set``) to ``data``; values are parsed as YAML, except
    that a key whose field only takes text gets the value as typed (``name=1e3`` stays
    ``"1e3"``, ``dp.mode=off`` stays ``"off"``)."""
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        try:
            value = parse_yaml(raw)
        except yaml.YAMLError:
            raise ConfigError(f"--set {key}: {raw!r} is not a valid value") from None
        if value is not None and not isinstance(value, str | list | dict) and \
                _takes_only_text(_field_annotation(data, key)):
            value = raw.strip()
        set_dotted(data, key, value)


def _field_annotation(data: dict[str, Any], dotted: str) -> Any:
    """The type annotation of the configuration field at ``dotted`` (``None`` if unknown);
    ``data`` and ``model`` are looked up in the section the dataset / model name picks."""
    schema: Any = RunConfig
    *parents, leaf = dotted.split(".")
    for key in parents:
        if schema is RunConfig and key in ("data", "model"):
            schema = section_schema(data, key)
        else:
            field = schema.model_fields.get(key)
            annotation = field.annotation if field is not None else None
            schema = annotation if isinstance(annotation, type) and \
                issubclass(annotation, BaseModel) else None
        if schema is None:
            return None
    field = schema.model_fields.get(leaf)
    return field.annotation if field is not None else None


def _takes_only_text(annotation: Any) -> bool:
    """Whether a field of this type accepts nothing but strings (``str``, a ``Literal`` of
    strings, either optional)."""
    if annotation is str:
        return True
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return all(isinstance(a, str) for a in args)
    if origin in (Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        return bool(kinds) and all(_takes_only_text(a) for a in kinds)
    return False
