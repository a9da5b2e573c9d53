"""Checks for values that are easy to get wrong; each error names the key, the value and the allowed range."""

from __future__ import annotations

import math
from collections.abc import Mapping


class ConfigError(ValueError):
    """A configuration value outside its meaning. Raised before any work starts."""

    def __init__(self, key: str, value, allowed: str, hint: str = ""):
        self.key, self.value, self.allowed, self.hint = key, value, allowed, hint
        message = f"{key}={value!r} is invalid: {key} must be {allowed}"
        super().__init__(message + (f". {hint}" if hint else ""))

    def prefixed(self, prefix: str) -> ConfigError:
        """The same error for the key under ``prefix`` (e.g. ``callbacks.certification.``), hint kept."""
        if self.key.startswith(prefix):
            return self
        return ConfigError(prefix + self.key, self.value, self.allowed, self.hint)


class MissingValueError(ConfigError):
    """Mandatory configuration values (``???`` in a config file) that were not given."""

    def __init__(self, keys: str | list[str]):
        keys = [keys] if isinstance(keys, str) else list(keys)
        self.key, self.value, self.allowed, self.hint = keys[0], "???", "given", ""
        self.keys = keys
        verb = "is" if len(keys) == 1 else "are"
        ValueError.__init__(
            self, f"{' and '.join(keys)} {verb} missing: set {' '.join(f'{k}=...' for k in keys)}"
        )


def _number(key: str, value):
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(key, value, "a number")
    return value


def require_positive(key: str, value) -> None:
    """A finite ``value > 0`` (NaN and inf pass a bare ``> 0`` test, so they are refused explicitly)."""
    if not (math.isfinite(_number(key, value)) and value > 0):
        raise ConfigError(key, value, "> 0" if math.isfinite(value) else "a finite number > 0")


def require_at_least(key: str, value, minimum: int) -> None:
    """Integer ``value >= minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(key, value, f"an integer >= {minimum}")


def require_open_unit(key: str, value) -> None:
    """``0 < value < 1``."""
    if not 0 < _number(key, value) < 1:
        raise ConfigError(key, value, "in the open interval (0, 1)")


def require_non_negative(key: str, value) -> None:
    """A finite ``value >= 0`` (NaN passes a bare ``< 0`` test, so it is refused explicitly)."""
    if not (math.isfinite(_number(key, value)) and value >= 0):
        raise ConfigError(key, value, "a finite number >= 0")


def require_share(key: str, value) -> None:
    """A fraction ``0 <= value <= 1``."""
    if not 0 <= _number(key, value) <= 1:
        raise ConfigError(key, value, "in [0, 1]")


def unreadable_format(values: Mapping, newest: int) -> str | None:
    """None when a stored record's ``format`` tag is one this version reads (an int from 0, untagged, to
    ``newest``), else why not, to follow the record's source in its one-line error (the checkpoint metadata
    and the run records share the rule)."""
    version = values.get("format", 0)
    if isinstance(version, int) and not isinstance(version, bool) and 0 <= version <= newest:
        return None
    return f"format={version!r}, which this rs-lightning does not read (formats 0 to {newest})"
