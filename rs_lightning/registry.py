"""Build the project's classes from a config read from a file, by name and never by import.

A checkpoint records the architecture and the data module that trained it as Hydra configs
(``{"_target_": "rs_lightning.models.lenet.LeNet", ...}``). Reading such a config back, the ``_target_`` is
only a key into a :class:`Registry`, an explicit table of this project's classes (each a subclass of one
base: ``nn.Module`` for models, ``RSDataModule`` for data), and the arguments must be plain values:
None, booleans, integers, finite floats, strings, and lists or string-keyed mappings of those, with no key
that starts with ``_`` (Hydra's ``_target_``, ``_args_``, ``_partial_`` ...). Nothing named in the file is
imported, looked up as an attribute or called except a registered class's constructor, so a config in a
downloaded checkpoint cannot run code, whatever strings it holds.

A user's own classes join a registry through a Python entry-point group (the Python packaging
specification's entry points; ``[project.entry-points."rs_lightning.models"]`` in the user package's
``pyproject.toml``, ``mynet = "mypkg.nets:MyNet"``). Installing the package is the user's act of trust: a
config may then name ``mypkg.nets.MyNet``, and only then is ``mypkg.nets`` imported. A name no installed
package registered imports nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from rs_lightning.validation import ConfigError

TARGET = "_target_"
MAX_DEPTH = 4
"""Nesting levels of lists/mappings accepted in an argument (the composite data module's ``source`` is 2)."""


class RegistryError(ValueError):
    """A config that does not name a registered class with plain arguments, or that the class refuses."""


def check_plain(key: str, value: Any, depth: int = 0, underscore_keys: bool = False) -> None:
    """Refuse anything but None, bool, int, finite float, str, and lists/mappings of those (``key`` names
    the value in the message); mapping keys starting with ``_`` are refused unless ``underscore_keys`` (for
    values that are only recorded, never built)."""
    if value is None or isinstance(value, bool | int | str):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise RegistryError(f"{key}={value!r} is not a finite number")
        return
    if depth >= MAX_DEPTH:
        raise RegistryError(f"{key} is nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_plain(f"{key}[{i}]", item, depth + 1, underscore_keys)
        return
    if isinstance(value, Mapping):
        for name, item in value.items():
            if not isinstance(name, str) or (name.startswith("_") and not underscore_keys):
                raise RegistryError(
                    f"{key} holds the key {name!r}: only plain names are accepted (no _target_ or other "
                    "_-keys: nothing is built from a nested entry)"
                )
            check_plain(f"{key}.{name}", item, depth + 1, underscore_keys)
        return
    raise RegistryError(f"{key} is a {type(value).__name__}, not a plain value (number, string or list)")


class Registry:
    """The classes of one kind (e.g. "model") that a config read from a file may name.

    Args:
        kind: what the classes are, for messages (e.g. ``"model"``).
        base: every class must subclass it.
        classes: the registered classes; each is known by its dotted name ``module.QualName``.
        aliases: further names for registered classes (names older checkpoints recorded).
        entry_points: the entry-point group through which installed packages register more classes
            (each entry point ``name = "module:QualName"``, known by the dotted name ``module.QualName``
            and by the class's own); loaded, importing its module, only when a config names it.
    """

    def __init__(
        self,
        kind: str,
        base: type,
        classes: list[type],
        aliases: Mapping[str, type] | None = None,
        entry_points: str | None = None,
    ) -> None:
        self.kind, self.base, self.group = kind, base, entry_points
        self.classes: dict[str, type] = {dotted_name(c): c for c in classes}
        self.classes.update(aliases or {})
        for name, cls in self.classes.items():
            if not (isinstance(cls, type) and issubclass(cls, base)):
                raise TypeError(f"registry of {kind}s: {name} is not a subclass of {base.__name__}")

    def installed(self) -> dict[str, metadata.EntryPoint]:
        """The entry points installed packages registered in this registry's group, by dotted name; none
        is loaded."""
        if self.group is None:
            return {}
        found = {}
        for entry in metadata.entry_points(group=self.group):
            module, _, attr = entry.value.partition(":")
            found[f"{module.strip()}.{attr.strip()}" if attr else module.strip()] = entry
        return found

    def _load_installed(self, name: str, key: str) -> type | None:
        """The class an installed package registered as ``name`` (importing its module), or None."""
        entry = self.installed().get(name)
        if entry is None:
            return None
        try:
            cls = entry.load()
        except Exception as err:  # noqa: BLE001 (the user's package: any failure is one line)
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise RegistryError(
                f"{key}.{TARGET}={name!r}: the entry point {entry.name} = {entry.value!r} of the group "
                f"{self.group!r} does not load ({type(err).__name__}: {first})"
            ) from err
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise RegistryError(
                f"{key}.{TARGET}={name!r}: the entry point {entry.name} = {entry.value!r} of the group "
                f"{self.group!r} is not a subclass of {self.base.__module__}.{self.base.__qualname__}"
            )
        self.classes[name] = self.classes[dotted_name(cls)] = cls
        return cls

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self.classes or name in self.installed())

    def lookup(self, name: Any, key: str) -> type:
        """The class registered as ``name`` (by this project or an installed package's entry point); a
        RegistryError listing the registered names and saying how to register a class otherwise."""
        if name in self.classes:
            return self.classes[name]
        cls = self._load_installed(name, key) if isinstance(name, str) else None
        if cls is None:
            known = sorted(
                {n for n, c in self.classes.items() if n == dotted_name(c)} | set(self.installed())
            )
            how = (
                f"; a class of your own: register it under the entry-point group {self.group!r} of an "
                f'installed package (pyproject.toml: [project.entry-points."{self.group}"] '
                f'name = "yourpkg.module:YourClass"; then pip install it)'
                if self.group
                else ""
            )
            raise RegistryError(
                f"{key}.{TARGET}={name!r} is not a registered {self.kind} (one of {', '.join(known)}){how}"
            )
        return cls

    def build(self, config: Any, key: str, **kwargs: Any) -> Any:
        """``cls(**arguments, **kwargs)`` for the registered class ``config["_target_"]``, after checking that
        every argument from ``config`` is plain; ``kwargs`` come from the caller (trusted). Any refusal,
        including the class's own TypeError/ValueError, is a one-line RegistryError naming ``key`` (a
        ConfigError of the class, already one line naming its key, passes unchanged)."""
        if not isinstance(config, Mapping):
            raise RegistryError(f"{key} is a {type(config).__name__}, not a mapping with {TARGET}")
        cls = self.lookup(config.get(TARGET), key)
        arguments = {}
        for name, value in config.items():
            if name == TARGET:
                continue
            if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
                raise RegistryError(f"{key} holds the key {name!r}: only argument names are accepted")
            check_plain(f"{key}.{name}", value)
            arguments[name] = value
        try:
            return cls(**arguments, **kwargs)
        except ConfigError:  # the class's own one-line refusal, naming its key
            raise
        except (TypeError, ValueError) as err:
            shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise RegistryError(f"{key}: {dotted_name(cls)}({shown}) is refused: {first}") from err


def dotted_name(cls: type) -> str:
    """``module.QualName`` of a class: the ``_target_`` a Hydra config names it by."""
    return f"{cls.__module__}.{cls.__qualname__}"
