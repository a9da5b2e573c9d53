"""Samplers: how CERTIFY spends its draws on each input, one file each (:mod:`.base` holds the contract).

A new sampler is one file with a :class:`~.base.Sampler` subclass, plus its entry in :data:`SAMPLERS` (or a
call of :func:`register_sampler` from the user's own code); ``sampling=<name>`` then selects it in
``certify.py``, the callback and :class:`~rs_lightning.smoothing.Smooth`, and its settings are typed as
``<name>.<field>=``.
"""

from __future__ import annotations

from collections.abc import Mapping

from rs_lightning.validation import ConfigError

from .base import Count, Draws, Sampler
from .cohen import Cohen
from .iss import InputSpecific
from .sequential import Sequential

SAMPLERS: dict[str, type[Sampler]] = {"cohen": Cohen, "iss": InputSpecific, "sequential": Sequential}
"""Every sampler by the name ``sampling=`` takes."""


def register_sampler(cls: type[Sampler]) -> type[Sampler]:
    """Add ``cls`` to :data:`SAMPLERS` under ``cls.name`` (usable as a class decorator); a name taken by
    another class is refused."""
    if not (isinstance(cls, type) and issubclass(cls, Sampler)) or not cls.name:
        raise TypeError(f"{cls!r} is not a Sampler subclass with a name")
    if SAMPLERS.get(cls.name, cls) is not cls:
        raise ValueError(f"sampling={cls.name} is taken by {SAMPLERS[cls.name].__qualname__}")
    SAMPLERS[cls.name] = cls
    return cls


def sampler_class(name) -> type[Sampler]:
    """The class of ``sampling=name`` (case-insensitive); a ConfigError naming those there are."""
    text = str(name).lower() if name is not None else None
    if text not in SAMPLERS:
        raise ConfigError("sampling", name, "one of " + ", ".join(SAMPLERS))
    return SAMPLERS[text]


def check_unused_settings(values: Mapping, sampling: str, prefix: str = "") -> None:
    """ConfigError for a setting of a sampler other than ``sampling`` that differs from its default: in a
    config that lists every sampler's node (``iss.k0=...`` with ``sampling=cohen``) it would be ignored."""
    for name, cls in SAMPLERS.items():
        node = values.get(name)
        if name == sampling or not isinstance(node, Mapping):
            continue
        defaults = cls.defaults()
        for key, value in node.items():
            if key not in defaults:
                raise ConfigError(f"{prefix}{name}.{key}", value, f"a key of {name}: " + ", ".join(defaults))
            default = defaults[key]
            if value != default and not (isinstance(value, list) and tuple(value) == default):
                raise ConfigError(
                    f"{prefix}{name}.{key}", value, f"left at its default unless sampling={name}"
                )


__all__ = [
    "SAMPLERS",
    "Cohen",
    "Count",
    "Draws",
    "InputSpecific",
    "Sampler",
    "Sequential",
    "check_unused_settings",
    "register_sampler",
    "sampler_class",
]
