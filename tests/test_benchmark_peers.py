"""benchmarks/peers.py end to end, as a subprocess: TPC-H on DuckDB and Squall at two worker counts (SF0.01),
and its answer to a bad ``--engines``. No timing is asserted."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "peers.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def test_duckdb_and_squall_at_two_worker_counts(sf001, tmp_path):
    report = tmp_path / "peers.json"
    options = {"--sf": "0.01", "--data": str(sf001), "--queries": "1,3", "--engines": "duckdb,squall"}
    options |= {"--workers": "1,2", "--repeat": "1", "--json": str(report)}
    proc = _run(*(part for option in options.items() for part in option))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert re.search(r"^Q01 ", out, re.M) and re.search(r"^Q03 ", out, re.M), out
    for engine in ("squall-w1", "squall-w2"):
        assert re.search(rf"^geomean ratio {engine}/duckdb: \d+\.\d\d over 2 of 2 queries$", out, re.M), out
    assert "DIFFERS" not in out and "ERROR" not in out
    assert "geomean ratio polars" not in out  # not asked for
    figures = json.loads(report.read_text())
    assert figures["geomean"]["squall-w2"]["queries"] == 2 and figures["exit_status"] == 0


def test_bad_engine_exits_2_with_one_line():
    proc = _run("--engines", "duckdb,spark")
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "unknown engine 'spark'" in lines[0] and "duckdb" in lines[0]
