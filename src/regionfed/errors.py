"""Typed exceptions of the public API.

The CLI turns every :class:`RegionFedError` into one ``error: ...`` line on stderr and exit
status 2; anything else is a bug and keeps its traceback.
"""


class RegionFedError(ValueError):
    """Base class for bad input: invalid configuration, malformed data, unknown names."""


class ConfigError(RegionFedError):
    """An invalid run configuration (unknown key, out-of-range value, bad combination)."""


class UnknownMethodError(ConfigError):
    """A method name that is not registered."""


class MethodNotApplicableError(ConfigError):
    """A method that cannot run on this model or setting (e.g. FedTP on a model without
    attention projections, or a method with no user-level DP guarantee while DP is on);
    comparison tables report it as n/a."""


class PrivacyBudgetError(ConfigError):
    """A round would take ε past ``training.target_epsilon``."""


class DataError(RegionFedError):
    """A malformed or inconsistent dataset or data file."""


class NumericalError(RegionFedError):
    """A NaN or infinite value where a finite one is required (e.g. a client update)."""


class DeploymentError(RegionFedError):
    """A run on a distributed engine (Flower's Deployment Engine) failed or returned no
    result; the message carries the reason from its log."""


def validation_messages(exc: Exception, prefix: str = "") -> list[str]:
    """``key.path: what was wrong`` for every error of a pydantic ``ValidationError``."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return [str(exc)]
    parts = []
    for err in errors():
        loc = prefix + ".".join(str(p) for p in err.get("loc", ()))
        msg = err.get("msg", "invalid value")
        if err.get("type") == "extra_forbidden":
            msg = "unknown key"
        elif err.get("type") == "value_error" and "error" in err.get("ctx", {}):
            msg = str(err["ctx"]["error"])  # already "key: what" from a nested section
        parts.append(f"{loc}: {msg}" if loc.rstrip(".") else msg)
    return parts


def config_error_from_validation(exc: Exception, what: str = "config") -> ConfigError:
    """Turn a pydantic ``ValidationError`` into a one-line :class:`ConfigError`.

    The message names the offending key and what was wrong with it, e.g.
    ``invalid config: data.alpha_d: Input should be greater than 0``.
    """
    return ConfigError(f"invalid {what}: " + "; ".join(validation_messages(exc)))
