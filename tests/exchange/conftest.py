"""The exchange backend every shared-suite module runs over: one per implementation, skipped with its reason."""

from __future__ import annotations

import pytest

from .backends import BACKENDS, Backend


@pytest.fixture(params=BACKENDS, ids=[b.name for b in BACKENDS])
def backend(request, tmp_path):
    b: Backend = request.param
    reason = b.skip()
    if reason:
        pytest.skip(reason)
    with b.open(tmp_path) as factory:
        yield b, factory
