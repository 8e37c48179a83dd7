"""Each backend runs its own TPC-H queries: (backend, query) pairs outside ``Backend.queries`` are deselected."""

from __future__ import annotations

from .backends import Backend


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        backend, n = params.get("site"), params.get("n")
        if isinstance(backend, Backend) and n is not None and n not in backend.queries:
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
