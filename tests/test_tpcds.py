"""TPC-DS through the embedded engine at SF0.01, checked against DuckDB on the same files.

All 99 queries (DuckDB's ``tpcds_queries()`` texts) run on W = 3, a fifth of them on W = 1 too (Squall's own
stage plan there; one case runs the whole query in DuckDB at W = 1, the thin-shell path). A query Squall
refuses is a strict xfail whose reason is the exact refusal (``REFUSED``, empty since the one-rank fallback): when
the planner learns it, the xfail turns into a failure and its line must go. ``ONE_RANK`` lists the parts that
still run on rank 0 only (the fallback), checked exactly with the golden plans: together they are the to-do list
of the planner work. A refusal with another message fails. Wrong answers and internal errors are never listed.

The golden ``explain`` files (W = 4) of the queries that plan today live in ``tests/golden/tpcds-explain/``;
after an intended plan change regenerate them with ``SQUALL_UPDATE_GOLDEN=1 pytest tests/test_tpcds.py -k
golden`` and review the diff. The dataset (about 4 MB) is generated once per session, or kept in
``$SQUALL_TPCH_CACHE``; the first run also builds the generator's venv (``build/tpcds-venv``, from PyPI).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import squall
from squall import tpcds
from squall.driver.ir.nodes import WHOLE_QUERY_AT_W1
from squall.driver.report.explain import explain_plan
from squall.errors import DataError, NotSupportedError, OptionError
from squall.testing import assert_same_result

from .tpcds_data import duckdb_over, tpcds_dataset

SF = 0.01
GOLDEN = Path(__file__).parent / "golden" / "tpcds-explain"

# The to-do list of the planner work. REFUSED: query number -> Squall's refusal today (exact message); such a
# query is a strict xfail, so when it starts to plan its line must go. ONE_RANK: query number -> the reasons
# (plan notes) of the parts that have no distributed plan yet and run on rank 0 over gathered inputs; the test
# of the golden plans checks this list exactly, so a query that gets a distributed plan must leave it too.
REFUSED: dict[int, str] = {}
ONE_RANK: dict[int, set[str]] = {}
ONE_RANK_NOTE = re.compile(r"one rank \((.*)\): DuckDB runs this part on rank 0 only")

W1_QUERIES = tuple(range(2, 100, 5))


@pytest.fixture(scope="session")
def tpcds_sf001(tmp_path_factory):
    """TPC-DS SF0.01, one file per table."""
    return tpcds_dataset(SF, tmp_path_factory=tmp_path_factory)


@pytest.fixture(scope="module")
def reference(tpcds_sf001):
    con = duckdb_over(tpcds_sf001)
    yield con
    con.close()


def _cases(workers: int, numbers: tuple[int, ...]) -> list:
    cases = []
    for n in numbers:
        marks = []
        if n in REFUSED:
            marks.append(
                pytest.mark.xfail(
                    strict=True, raises=NotSupportedError, reason=f"not supported yet: {REFUSED[n]}"
                )
            )
        cases.append(pytest.param(workers, n, id=f"w{workers}-q{n:02d}", marks=marks))
    return cases


@pytest.mark.parametrize(("workers", "n"), _cases(3, tpcds.QUERY_NUMBERS) + _cases(1, W1_QUERIES))
def test_tpcds_query(connections, tpcds_sf001, reference, workers, n):
    sql = tpcds.query(n)
    expected = reference.sql(sql).to_arrow_table()
    con = connections.get(tpcds_sf001, workers)
    try:
        result = con.sql(sql)
    except NotSupportedError as exc:
        if str(exc) != REFUSED.get(n):
            raise AssertionError(
                f"Q{n} refused with {str(exc)!r}, expected "
                + (repr(REFUSED[n]) if n in REFUSED else "an answer")
            ) from exc
        raise
    assert_same_result(result.to_arrow(), expected, sql, reference=reference)


def test_tpcds_whole_query_at_w1(connections, tpcds_sf001, reference):
    """The thin-shell path: at W=1 DuckDB plans the whole query (Q2's CTE, union and joins) over Squall's
    scans; the other W=1 cases run Squall's own stage plan."""
    sql = tpcds.query(2)
    con = connections.get(tpcds_sf001, 1, whole_query=True)
    assert any(n.startswith(WHOLE_QUERY_AT_W1) for n in con.plan(sql).notes)
    assert_same_result(con.sql(sql).to_arrow(), reference.sql(sql).to_arrow_table(), sql, reference=reference)


# --- golden plans ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def planner(tpcds_sf001):
    con = squall.Connection(data=str(tpcds_sf001), workers=4)
    yield con
    con.close()


@pytest.mark.parametrize("n", [n for n in tpcds.QUERY_NUMBERS if n not in REFUSED], ids=lambda n: f"q{n:02d}")
def test_explain_matches_golden(planner, n):
    plan = planner.plan(tpcds.query(n))
    one_rank = {m.group(1) for note in plan.notes if (m := ONE_RANK_NOTE.match(note))}
    assert one_rank == ONE_RANK.get(n, set()), f"parts of Q{n} on one rank changed: update ONE_RANK"
    text = explain_plan(plan) + "\n"
    path = GOLDEN / f"q{n:02d}.txt"
    if os.environ.get("SQUALL_UPDATE_GOLDEN"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing {path}: run with SQUALL_UPDATE_GOLDEN=1"
    assert text == path.read_text(), (
        f"plan of TPC-DS Q{n} changed: review, then SQUALL_UPDATE_GOLDEN=1 to accept"
    )


def test_no_stale_golden_files():
    planned = {f"q{n:02d}.txt" for n in tpcds.QUERY_NUMBERS if n not in REFUSED}
    assert sorted(p.name for p in GOLDEN.glob("*.txt") if p.name not in planned) == []


# --- the generator and the query texts --------------------------------------------------------------------


def test_dataset_is_complete_and_typed(tpcds_sf001):
    files = tpcds.dataset_files(tpcds_sf001)
    assert list(files) == list(tpcds.TABLES) and len(files) == 24
    assert tpcds.dataset_sf(tpcds_sf001) == SF
    sales = pq.read_schema(files["store_sales"][0])
    assert str(sales.field("ss_sold_date_sk").type) == "int64"
    assert str(sales.field("ss_net_paid").type) == "decimal128(7, 2)"
    assert str(pq.read_schema(files["date_dim"][0]).field("d_date").type) == "date32[day]"
    assert pq.ParquetFile(files["store_sales"][0]).metadata.num_row_groups > 3  # something to split


def test_generate_refuses_another_scale_factor(tpcds_sf001):
    with pytest.raises(DataError, match=r"holds TPC-DS SF 0\.01, not SF 0\.02"):
        tpcds.generate(0.02, tpcds_sf001)
    assert tpcds.generate(SF, tpcds_sf001)  # the same SF: left as it is


def test_generate_refuses_other_tables_and_bad_sf(tmp_path):
    (tmp_path / "customer.parquet").write_bytes(b"not TPC-DS")
    with pytest.raises(DataError, match="not TPC-DS data"):
        tpcds.generate(SF, tmp_path)
    with pytest.raises(OptionError, match=r"at least 0\.01"):
        tpcds.generate(0.001, tmp_path / "x")


def test_cli_refuses_another_scale_factor_in_one_line(tpcds_sf001):
    proc = subprocess.run(
        [sys.executable, "-m", "squall.cli", "gen-tpcds", "--sf", "1", "--out", str(tpcds_sf001)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert (
        proc.stderr.count("\n") == 1
        and proc.stderr.startswith("error: ")
        and "SF 0.01, not SF 1" in proc.stderr
    )


def test_query_texts_are_the_extensions(tpcds_sf001, tmp_path):
    """The committed texts equal what tpcds_queries() returns (the venv exists once the dataset does)."""
    exported = tpcds.export_queries(tmp_path)
    assert [p.name for p in exported] == [f"q{n:02d}.sql" for n in tpcds.QUERY_NUMBERS]
    for n in tpcds.QUERY_NUMBERS:
        assert (tmp_path / f"q{n:02d}.sql").read_text().strip().rstrip(";").rstrip() == tpcds.query(n)


def test_query_numbers_are_checked():
    with pytest.raises(OptionError):
        tpcds.query(100)
    assert not tpcds.query(1).endswith(";")


def test_benchmark_times_cold_runs_and_profiles(tpcds_sf001):
    """``benchmarks/tpcds.py --profile``: each query's first run is cold (planned, nothing cached) and timed
    apart from the best run; the profile shows cold planning by step and the best run per stage."""
    import importlib.util
    import io

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "tpcds.py"
    spec = importlib.util.spec_from_file_location("squall_benchmark_tpcds", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up
    try:
        spec.loader.exec_module(bench)
    finally:
        sys.modules.pop(spec.name, None)
    out = io.StringIO()
    status = bench.main(
        ["--sf", "0.01", "--data", str(tpcds_sf001), "--workers", "2", "--queries", "3,37", "--profile"], out
    )
    text = out.getvalue()
    assert status == 0, text
    assert text.count(" cold ") == 2 and "(planning " in text
    assert text.count("      planning (cold) ") == 2 and "bind " in text and "stage ranks output" in text
    assert "(first run, cold: planning included); planning (cold) median" in text
    assert "planning (cold), summed over the queries: " in text and "best runs' stages, slowest rank" in text
