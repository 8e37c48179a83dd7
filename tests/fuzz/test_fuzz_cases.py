"""Every saved fuzz case (``tests/fuzz/cases/NNN.sql``) replayed against DuckDB at W = 1..4, on the data of
its ``schema`` header line (TPC-H with its NULL-heavy twins when absent, or TPC-DS).

A case whose header says ``xfail`` and lists the worker count in ``fails-at`` is an open bug:
``xfail(strict=True)``, so the test reports XPASS (and fails) once the bug is fixed — then delete the
``xfail``/``fails-at`` lines of the case and it stays as a regression test.
"""

from __future__ import annotations

import pytest

from .cases import load_cases

CASES = load_cases()
WORKERS = (1, 2, 3, 4)
ORACLES = {"tpch": "fuzz_oracle", "tpcds": "fuzz_tpcds_oracle"}  # schema -> fixture


def _params():
    for case in CASES:
        for w in WORKERS:
            marks = []
            if "xfail" in case.header and w in case.fails_at():
                reason = f"{case.header['xfail']}: {case.header.get('differs', '')[:200]}"
                marks.append(pytest.mark.xfail(strict=True, reason=reason))
            yield pytest.param(case, w, id=f"{case.name}-w{w}", marks=marks)


@pytest.mark.skipif(not CASES, reason="no saved fuzz cases")
@pytest.mark.parametrize(("case", "workers"), list(_params()))
def test_fuzz_case(request, case, workers):
    assert case.schema in ORACLES, f"case {case.name}: unknown schema {case.schema!r}"
    oracle = request.getfixturevalue(ORACLES[case.schema])
    expected = oracle.reference(case.sql)
    assert not isinstance(expected, Exception), f"DuckDB rejects case {case.name}: {expected}"
    out = oracle.run_squall(case.sql, workers, expected)
    # a refusal fails too: a saved case ran once, so refusing it now is a regression (or, if the refusal is
    # right, the case must change)
    assert out.kind == "passed", f"case {case.name} at W={workers}: {out.kind}: {out.detail}\n{case.sql}"
