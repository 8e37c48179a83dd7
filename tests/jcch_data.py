"""Skewed (JCC-H-style) TPC-H datasets for tests, made once from the cached uniform data and then cached.

``skew_dataset(sf, name)`` is ``$SQUALL_TPCH_CACHE/jcch-sf<sf>-<label>`` (or a session temp folder, as
:mod:`tests.tpch_data`), regenerated when its ``jcch.json`` marker does not name the same options. The
scale factor of the skew suite is ``$SQUALL_SKEW_SF`` (default 1, the issue's; 0.01 for a quick run).
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import pytest

from squall.tpch.skew import SkewSpec, generate_skewed, read_marker
from tests.tpch_data import _cache_base, tpch_dataset

SETTINGS: dict[str, SkewSpec] = {
    "hot30": SkewSpec(hot_share=0.3, hot_keys=1, hot_orders=1000),
    "zipf15": SkewSpec(hot_share=0.0, zipf=1.5, order_zipf=0.5),
}
"""The two skew settings of the correctness suite, both safe at SF1 (Q21's self-join on ``l_orderkey`` stays
near-linear): 30 % of lineitems on one hot part (its 4 suppliers) and 1,000 hot orders, 30 % of orders on
one hot customer; Zipf(1.5) parts and customers (≈38 % on the top key) with Zipf(0.5) orders."""


def skew_sf() -> float:
    """The skew suite's scale factor: ``$SQUALL_SKEW_SF`` or 1."""
    text = os.environ.get("SQUALL_SKEW_SF", "1")
    try:
        sf = float(text)
    except ValueError:
        raise pytest.UsageError(f"SQUALL_SKEW_SF must be a number, got {text!r}") from None
    return sf


def skew_dataset(
    sf: float,
    spec: str | SkewSpec,
    parts: int | None = None,
    *,
    tmp_path_factory: pytest.TempPathFactory | None = None,
) -> Path:
    """Folder holding skewed TPC-H (``spec``: a SETTINGS name or a SkewSpec) at ``sf``, made on first use."""
    spec = SETTINGS[spec] if isinstance(spec, str) else spec
    base = _cache_base(tmp_path_factory)
    out = base / (f"jcch-sf{sf:g}-{spec.label()}" + (f"-parts{parts}" if parts else ""))
    want = {"sf": float(sf), "parts": parts, "spec": asdict(spec)}
    if read_marker(out) != want:
        source = tpch_dataset(sf, parts, tmp_path_factory=tmp_path_factory)
        generate_skewed(sf, out, spec, parts, force=True, source=source)
    return out
