"""Golden files of ``squall explain`` for the 22 TPC-H queries (SF1, 4 workers).

A plan change shows up as a diff of ``tests/golden/explain/qNN.txt`` and is
reviewed like code. After an intended change, regenerate with
``SQUALL_UPDATE_GOLDEN=1 pytest tests/test_explain_golden.py`` and read the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import squall
from squall import tpch

GOLDEN = Path(__file__).parent / "golden" / "explain"
#: each worker's memory budget in the goldens' last line (pinned: the machine's own share varies with its memory)
GOLDEN_WORKER_MEMORY = 4608 << 20


@pytest.fixture(scope="module")
def planner(sf1):
    # plans as on a machine with a core per rank, whatever this one has (ranks sharing cores raise the
    # skew-aware joins' threshold: PlannerOptions.ranks_per_core)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("squall.driver.platforms.local.platform.os.cpu_count", lambda: 4)
        con = squall.Connection(data=str(sf1), workers=4, worker_memory=GOLDEN_WORKER_MEMORY)
        yield con
        con.close()


@pytest.mark.parametrize("n", tpch.QUERY_NUMBERS, ids=lambda n: f"q{n:02d}")
def test_explain_matches_golden(planner, n):
    text = planner.explain(tpch.query(n)) + "\n"
    path = GOLDEN / f"q{n:02d}.txt"
    if os.environ.get("SQUALL_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing {path}: run with SQUALL_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"plan of Q{n} changed: review, then SQUALL_UPDATE_GOLDEN=1 to accept"
