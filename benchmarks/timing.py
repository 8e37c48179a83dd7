"""Best-of-N timing for the benchmark scripts (imported from their own folder)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def best_of(run: Callable[[], Any], repeat: int) -> tuple[float, list[Any]]:
    """The best seconds of ``repeat`` calls of ``run``, and every call's output (so each answer can be checked)."""
    best, outs = float("inf"), []
    for _ in range(repeat):
        start = time.perf_counter()
        outs.append(run())
        best = min(best, time.perf_counter() - start)
    return best, outs
