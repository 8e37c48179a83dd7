"""Skewed (JCC-H-style) TPC-H datasets for tests, made once from the cached uniform data and then cached.

``skew_dataset(sf, name)`` is ``$SQUALL_TPCH_CACHE/jcch-sf<sf>-<label>`` (or a session temp folder, as
:mod:`tests.tpch_data`), regenerated when its ``jcch.json`` marker does not name the same options. The
scale factor of the skew suite is ``$SQUALL_SKEW_SF`` (default 0.01; set 1 for the issue's SF1 run).
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import pytest

from squall.tpch.skew import SkewSpec, generate_skewed, read_marker
from tests.tpch_data import _cache_base, tpch_dataset

SETTINGS: dict[str, SkewSpec] = {
    "hot30": SkewSpec(hot_share=0.3, hot_keys=1),
    "zipf15": SkewSpec(hot_share=0.0, zipf=1.5),
}
"""The two skew settings of the correctness suite: 30 % of lineitem/orders on one hot key; Zipf(1.5) keys."""


def skew_sf() -> float:
    """The skew suite's scale factor: ``$SQUALL_SKEW_SF`` or 0.01."""
    text = os.environ.get("SQUALL_SKEW_SF", "0.01")
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
