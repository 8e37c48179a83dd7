"""A process's one-time costs are paid ahead of its first query (squall/warmup.py).

- a connection's driver makes pyarrow's first conversion (which imports pandas, installed here), its planning
  DuckDB instance and DuckDB's aggregate list on a thread of its own, before any query: checked in a new
  interpreter, where nothing else has done them;
- a local worker makes pyarrow's first conversion once idle after its first query: read off the
  shared objects mapped into the worker process (pandas' compiled modules).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import squall

pytest.importorskip("pandas")

DRIVER = """
import sys, threading
import squall
from squall.driver.frontend.bind import aggregate_function_names
from squall.operators import duck

assert "pandas" not in sys.modules and not duck._INSTANCES
con = squall.connect(sys.argv[1], workers=1)
for thread in threading.enumerate():
    if thread.name == "squall-warmup":
        thread.join()
assert "pandas" in sys.modules
assert aggregate_function_names.cache_info().currsize == 1
assert len(duck._INSTANCES) == 1  # the planning instance (threads=1), kept for the first query
print(con.sql("SELECT count(*) AS n FROM nation").arrow().column("n")[0].as_py())
con.close()
"""


def test_a_connection_warms_its_driver_before_the_first_query(sf001):
    out = subprocess.run(
        [sys.executable, "-c", DRIVER, str(sf001)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "25"


def _maps_pandas(pid: int) -> bool:
    return "/pandas/" in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc")
def test_a_worker_makes_its_first_conversion_once_idle(sf001):
    with squall.connect(str(sf001), workers=1) as con:
        con.sql("SELECT count(*) AS n FROM nation").arrow()  # the worker is up and has run its first query
        (proc,) = [p for p in con.platform._procs if p is not None]
        deadline = time.monotonic() + 60
        while not _maps_pandas(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _maps_pandas(proc.pid)
