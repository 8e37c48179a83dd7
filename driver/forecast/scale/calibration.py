"""Calibration: per-stage compute rates and IPC sizes measured here, plus TPC-H stage-size profiles.

The JSON (``calibration.json`` ships in the package; `benchmarks/scale_calibrate.py`
rewrites it) holds:

- ``rates``: rows/s of one thread per stage *shape* (``scan``, ``aggregate``, ``join``, ``sort``,
  ``project``; :func:`squall.driver.forecast.scale.workload.stage_shape`), where a stage's rows are the rows it
  scanned plus the rows it received, fitted as ``compute_s = stage_overhead_s + rows / rate``;
- ``thread_efficiency``: speed-up of t threads = t ** efficiency;
- ``ipc``: exchange piece size = ``piece_base_bytes + per_column_bytes x columns + ratio x Arrow bytes``;
- ``tpch``: per query, the stage signature of the plan the profile belongs to and each stage's output
  (rows, Arrow bytes) at the profiled scale factors (for :func:`squall.driver.forecast.scale.workload.scaled`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

SHAPES = ("scan", "aggregate", "join", "sort", "project")


@dataclass
class Calibration:
    """Rates and sizes the model uses (see module doc)."""

    rates: dict[str, float] = field(default_factory=lambda: {
        "scan": 40e6, "aggregate": 12e6, "join": 6e6, "sort": 8e6, "project": 20e6})  # fmt: skip
    stage_overhead_s: float = 0.004
    thread_efficiency: float = 0.8
    piece_base_bytes: float = 100.0
    per_column_bytes: float = 180.0
    ipc_ratio: float = 0.2
    encode_Bps: float = 400e6
    decompress_ratio: float = 3.0
    spill_slowdown: float = 2.0
    tpch: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def rate(self, shape: str) -> float:
        return float(self.rates.get(shape) or self.rates.get("project") or 1e7)

    def compute_s(self, shape: str, rows: float, threads: int = 1) -> float:
        """Seconds one rank computes a stage of ``shape`` over ``rows`` input rows with ``threads``."""
        speedup = max(1, threads) ** self.thread_efficiency
        return self.stage_overhead_s + rows / self.rate(shape) / speedup

    def ipc_piece_bytes(self, arrow_bytes: float, rows: float, columns: int) -> float:
        """Bytes of one exchange piece (an Arrow IPC stream, zstd) holding ``arrow_bytes`` of data."""
        return self.piece_base_bytes + self.per_column_bytes * columns + self.ipc_ratio * arrow_bytes

    def to_json(self) -> str:
        from dataclasses import asdict

        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Calibration:
        known = set(Calibration.__dataclass_fields__)
        return Calibration(**{k: v for k, v in d.items() if k in known})


DEFAULT_FILE = "calibration.json"


def load_calibration(path: str | Path | None = None) -> Calibration:
    """The calibration at ``path``, or the one shipped in the package (built-in defaults if absent)."""
    if path is not None:
        return Calibration.from_dict(json.loads(Path(path).read_text()))
    try:
        text = resources.files("squall.driver.forecast.scale").joinpath(DEFAULT_FILE).read_text()
    except (FileNotFoundError, OSError):
        return Calibration()
    return Calibration.from_dict(json.loads(text))
