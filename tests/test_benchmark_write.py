"""benchmarks/write.py: end to end as a subprocess (SF0.01, W=2, one run each), and its check catching a
wrong output. No timing is asserted."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "write.py"


def _module():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("bench_write", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_write"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_case_runs_and_is_checked(sf001, tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--data", str(sf001), "--workers", "2", "--repeat", "1", "--out",
         str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for case in ("lineitem", "lineitem by year", "nation"):
        row = re.search(rf"^{case} \| 2 \| \d+ \| (.*)$", proc.stdout, re.M)
        assert row, proc.stdout
        cells = row.group(1).split(" | ")
        assert float(cells[0]) > 0 and float(cells[1]) >= 0  # squall s, duckdb s
        driver_ready, driver_peak = (int(x) for x in cells[6].split("/"))
        assert 0 < driver_ready <= driver_peak
        assert len(cells[7].split("/")) == 2  # a peak per worker
    assert "DIFFERS" not in proc.stdout
    assert not list((tmp_path / "out").iterdir())  # every checked output removed


def test_a_wrong_output_is_reported(sf001, tmp_path):
    bench = _module()
    case = next(c for c in bench.CASES if c.name == "lineitem by year")
    check = duckdb.connect()
    source = bench.source_of(Path(sf001), case.table)
    expected = bench.checksum(check, f"({case.query.format(src=source)})", case.partitioned)
    good, bad = str(tmp_path / "good") + "/", str(tmp_path / "bad") + "/"
    check.execute(f"COPY ({case.query.format(src=source)}) TO '{good}' ({case.options})")
    # one row moved into another year's folder: same rows, same column sums, wrong partition
    check.execute(
        f"COPY (SELECT * REPLACE (CASE WHEN l_orderkey = 1 AND l_linenumber = 1 THEN y + 1 ELSE y END AS y) "
        f"FROM ({case.query.format(src=source)})) TO '{bad}' ({case.options})"
    )
    assert bench.check_runs(check, [good], case, expected) == []
    (problem,) = bench.check_runs(check, [bad], case, expected)
    assert problem.startswith(bad)
    assert not Path(good).exists() and not Path(bad).exists()
