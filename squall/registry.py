"""A lazy name → class registry, the one behind every pluggable part of Squall.

Platforms, exchanges, storages, state stores and scan kinds are each looked up
by name in a :class:`Registry`. Entries are ``"module:Class"`` strings and are
imported on first use, so optional dependencies (boto3, libfabric, …) load
only when their implementation is asked for.

May import: the standard library and :mod:`squall.errors` only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from squall.errors import OptionError, UserError

T = TypeVar("T")


class Registry(Generic[T]):
    """Names mapped to lazily imported implementations of one interface.

    ``what`` names the kind of thing in error messages ("platform", "storage
    scheme", …); ``error`` is the UserError subclass raised for unknown names.
    """

    def __init__(
        self, what: str, entries: dict[str, str] | None = None, error: type[UserError] = OptionError
    ) -> None:
        self.what = what
        self.error = error
        self._entries: dict[str, str] = dict(entries or {})
        self._loaded: dict[str, T] = {}

    def register(self, name: str, target: str | T) -> None:
        """Add or replace ``name``: a ``"module:attribute"`` string or the object itself."""
        self._loaded.pop(name, None)
        if isinstance(target, str):
            self._entries[name] = target
        else:
            self._entries[name] = f"<object {target!r}>"
            self._loaded[name] = target

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def get(self, name: str, where: str = "") -> T:
        """The implementation registered as ``name``; ``self.error`` naming the choices otherwise."""
        if name in self._loaded:
            return self._loaded[name]
        try:
            target = self._entries[name]
        except KeyError:
            suffix = f" in {where}" if where else ""
            raise self.error(
                f"unknown {self.what} {name!r}{suffix} (choose one of: {', '.join(self.names())})"
            ) from None
        module_name, _, attr = target.partition(":")
        obj: T = getattr(importlib.import_module(module_name), attr)
        self._loaded[name] = obj
        return obj

    def factory(self, name: str) -> Callable[..., object]:
        """Shorthand for calling the registered class: ``registry.factory(name)(**options)``."""
        return self.get(name)  # type: ignore[return-value]
