"""TPC-H support: query texts and parameters, data generation, and the TPC-H benchmark script."""

from __future__ import annotations

import datetime as dt
import importlib.util
import io
import os
import shutil
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlglot

import squall
import squall.tpch as tpch
from squall.errors import DataError, OptionError
from tests.tpch_data import duckdb_over, tpch_dataset

SF = 0.01
SEEDS = (1, 2, 3)
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def sf001(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tpch_dataset(SF, tmp_path_factory=tmp_path_factory)


@pytest.fixture(scope="module")
def con(sf001: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duckdb_over(sf001)
    yield connection
    connection.close()


# --- query texts --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", tpch.QUERY_NUMBERS)
def test_parameter_sets_cover_the_template(n: int) -> None:
    names = set(tpch.parameters(n))
    assert names, f"Q{n} has no parameters"
    assert set(tpch.validation_params(n)) == names
    for seed in SEEDS:
        assert set(tpch.random_params(n, seed)) == names
    text = tpch.query(n)
    assert "{{" not in text and "}}" not in text
    assert not text.rstrip().endswith(";")


@pytest.mark.parametrize("n", tpch.QUERY_NUMBERS)
def test_validation_and_random_queries_parse_and_run(n: int, con: duckdb.DuckDBPyConnection) -> None:
    sets = [tpch.validation_params(n, sf=SF)] + [tpch.random_params(n, seed, sf=SF) for seed in SEEDS]
    for params in sets:
        sql = tpch.query(n, params, sf=SF)
        tree = sqlglot.parse_one(sql, dialect="duckdb")
        assert isinstance(tree, sqlglot.exp.Query)
        result = con.sql(sql).to_arrow_table()
        assert result.num_columns == len(tree.selects)


def test_order_by_and_limit_as_in_the_spec() -> None:
    limits = {2: 100, 3: 10, 10: 20, 18: 100, 21: 100}
    no_order = {6, 14, 17, 19}
    for n in tpch.QUERY_NUMBERS:
        tree = sqlglot.parse_one(tpch.query(n), dialect="duckdb")
        limit = tree.args.get("limit")
        assert (limit.expression.to_py() if limit else None) == limits.get(n), n
        assert (tree.args.get("order") is None) == (n in no_order), n


def test_spec_text_details() -> None:
    q1 = tpch.query(1)
    assert "date '1998-12-01' - interval '90' day" in q1
    assert "(3)" not in q1
    assert tpch.query(15).lstrip().startswith("with revenue0 as (")
    assert "c_orders (c_custkey, c_count)" in tpch.query(13)
    assert "p_size in (49, 14, 23, 45, 19, 3, 36, 9)" in tpch.query(16)
    assert "('13', '31', '23', '29', '30', '18', '17')" in tpch.query(22)
    assert "sum(ps_supplycost * ps_availqty) * 0.0001" in tpch.query(11)
    assert "* 0.01\n" in tpch.query(11, sf=0.01)
    assert "* 0.00001\n" in tpch.query(11, sf=10)


def test_query_overrides_some_parameters() -> None:
    text = tpch.query(6, {"DISCOUNT": "0.05"})
    assert "between 0.05 - 0.01 and 0.05 + 0.01" in text
    assert "date '1994-01-01'" in text


@pytest.mark.parametrize(
    ("n", "params", "match"),
    [
        (0, None, "1 to 22"),
        (23, None, "1 to 22"),
        (True, None, "1 to 22"),
        (6, {"DATES": "1994-01-01"}, "no parameter DATES"),
        (3, {"SEGMENT": "BUILDING'; drop table x; --"}, "bad value"),
        (3, {"SEGMENT": 5}, "bad value"),
    ],
)
def test_query_rejects_bad_input(n: Any, params: Any, match: str) -> None:
    with pytest.raises(OptionError, match=match):
        tpch.query(n, params)


def test_validation_params_from_the_spec() -> None:
    assert tpch.validation_params(1) == {"DELTA": "90"}
    assert tpch.validation_params(3) == {"SEGMENT": "BUILDING", "DATE": "1995-03-15"}
    assert tpch.validation_params(8) == {
        "NATION": "BRAZIL",
        "REGION": "AMERICA",
        "TYPE": "ECONOMY ANODIZED STEEL",
    }
    assert tpch.validation_params(11) == {"NATION": "GERMANY", "FRACTION": "0.0001"}
    assert tpch.validation_params(11, sf=0.01)["FRACTION"] == "0.01"
    assert tpch.validation_params(18) == {"QUANTITY": "300"}


def test_random_params_are_deterministic_and_vary() -> None:
    for n in tpch.QUERY_NUMBERS:
        assert tpch.random_params(n, 7) == tpch.random_params(n, 7)
        if n != 11:  # Q11's only random choice is the nation: 25 values, collisions are likely
            assert len({tuple(tpch.random_params(n, s).items()) for s in range(20)}) > 1, n
    with pytest.raises(OptionError):
        tpch.random_params(1, "x")  # type: ignore[arg-type]


def _date(text: str) -> dt.date:
    return dt.date.fromisoformat(text)


@pytest.mark.parametrize("seed", range(40))
def test_random_params_follow_the_spec_rules(seed: int) -> None:
    nations = dict(tpch.NATIONS)
    types = {
        f"{a} {b} {c}" for a in tpch.TYPE_SYLLABLE1 for b in tpch.TYPE_SYLLABLE2 for c in tpch.TYPE_SYLLABLE3
    }
    brands = {f"Brand#{m}{n}" for m in range(1, 6) for n in range(1, 6)}
    p = {n: tpch.random_params(n, seed) for n in tpch.QUERY_NUMBERS}
    assert 60 <= int(p[1]["DELTA"]) <= 120
    assert (
        1 <= int(p[2]["SIZE"]) <= 50
        and p[2]["TYPE"] in tpch.TYPE_SYLLABLE3
        and p[2]["REGION"] in tpch.REGIONS
    )
    assert p[3]["SEGMENT"] in tpch.SEGMENTS and dt.date(1995, 3, 1) <= _date(p[3]["DATE"]) <= dt.date(
        1995, 3, 31
    )
    for n, lo, hi in ((4, (1993, 1), (1997, 10)), (10, (1993, 2), (1995, 1)), (14, (1993, 1), (1997, 12))):
        d = _date(p[n]["DATE"])
        assert d.day == 1 and lo <= (d.year, d.month) <= hi, (n, d)
    d15 = _date(p[15]["DATE"])
    assert d15.day == 1 and (1993, 1) <= (d15.year, d15.month) <= (1997, 10)
    for n in (5, 6, 12, 20):
        d = _date(p[n]["DATE"])
        assert (d.month, d.day) == (1, 1) and 1993 <= d.year <= 1997
    assert p[5]["REGION"] in tpch.REGIONS
    assert p[6]["DISCOUNT"] in {f"0.0{i}" for i in range(2, 10)} and p[6]["QUANTITY"] in {"24", "25"}
    assert p[7]["NATION1"] in nations and p[7]["NATION2"] in nations and p[7]["NATION1"] != p[7]["NATION2"]
    assert tpch.REGIONS[nations[p[8]["NATION"]]] == p[8]["REGION"] and p[8]["TYPE"] in types
    assert p[9]["COLOR"] in tpch.COLORS and p[20]["COLOR"] in tpch.COLORS
    assert p[11]["NATION"] in nations and p[11]["FRACTION"] == "0.0001"
    assert p[12]["SHIPMODE1"] in tpch.SHIP_MODES and p[12]["SHIPMODE2"] in tpch.SHIP_MODES
    assert p[12]["SHIPMODE1"] != p[12]["SHIPMODE2"]
    assert p[13]["WORD1"] in tpch.Q13_WORD1 and p[13]["WORD2"] in tpch.Q13_WORD2
    sizes = [int(p[16][f"SIZE{i}"]) for i in range(1, 9)]
    assert len(set(sizes)) == 8 and all(1 <= s <= 50 for s in sizes)
    assert p[16]["BRAND"] in brands and p[16]["TYPE"].count(" ") == 1
    assert p[16]["TYPE"].split()[0] in tpch.TYPE_SYLLABLE1 and p[16]["TYPE"].split()[1] in tpch.TYPE_SYLLABLE2
    c1, c2 = p[17]["CONTAINER"].split()
    assert p[17]["BRAND"] in brands and c1 in tpch.CONTAINER_SYLLABLE1 and c2 in tpch.CONTAINER_SYLLABLE2
    assert 312 <= int(p[18]["QUANTITY"]) <= 315
    assert (
        1 <= int(p[19]["QUANTITY1"]) <= 10 <= int(p[19]["QUANTITY2"]) <= 20 <= int(p[19]["QUANTITY3"]) <= 30
    )
    assert {p[19][f"BRAND{i}"] for i in (1, 2, 3)} <= brands
    assert p[20]["NATION"] in nations and p[21]["NATION"] in nations
    codes = [int(p[22][f"I{i}"]) for i in range(1, 8)]
    assert len(set(codes)) == 7 and all(10 <= c <= 34 for c in codes)


def test_value_domains_match_the_generated_data(con: duckdb.DuckDBPyConnection) -> None:
    def values(sql: str) -> set[Any]:
        return {row[0] for row in con.sql(sql).fetchall()}

    types = {
        f"{a} {b} {c}" for a in tpch.TYPE_SYLLABLE1 for b in tpch.TYPE_SYLLABLE2 for c in tpch.TYPE_SYLLABLE3
    }
    containers = {f"{a} {b}" for a in tpch.CONTAINER_SYLLABLE1 for b in tpch.CONTAINER_SYLLABLE2}
    assert values("select distinct p_type from part") <= types
    assert values("select distinct p_container from part") <= containers
    assert values("select distinct unnest(string_split(p_name, ' ')) from part") <= set(tpch.COLORS)
    assert values("select distinct l_shipmode from lineitem") == set(tpch.SHIP_MODES)
    assert values("select distinct c_mktsegment from customer") == set(tpch.SEGMENTS)
    assert values("select distinct r_name from region") == set(tpch.REGIONS)
    pairs = {tuple(r) for r in con.sql("select n_name, n_regionkey from nation").fetchall()}
    assert pairs == set(tpch.NATIONS)
    codes = values("select distinct substring(c_phone, 1, 2) from customer")
    assert codes <= {str(c) for c in range(10, 35)}


def test_validation_answers_at_sf001(con: duckdb.DuckDBPyConnection) -> None:
    q1 = con.sql(tpch.query(1, sf=SF)).to_arrow_table()
    assert q1.num_rows == 4
    assert q1.column("l_returnflag").to_pylist() == ["A", "N", "N", "R"]
    assert q1.column("l_linestatus").to_pylist() == ["F", "F", "O", "F"]
    q18 = con.sql(tpch.query(18, sf=SF)).to_arrow_table()
    assert q18.column_names[-1] == "sum(l_quantity)"  # DuckDB names an unaliased expression by its text


# --- generation ---------------------------------------------------------------------------------------------


def _rows(files: list[Path]) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def test_generate_single_files(sf001: Path) -> None:
    files = tpch.dataset_files(sf001)
    assert list(files) == list(tpch.TABLES)
    assert all(len(fs) == 1 and fs[0].name == f"{t}.parquet" for t, fs in files.items())
    counts = {t: _rows(fs) for t, fs in files.items()}
    assert counts["region"] == 5 and counts["nation"] == 25
    assert counts["supplier"] == 100 and counts["customer"] == 1500 and counts["orders"] == 15000
    assert counts["part"] == 2000 and counts["partsupp"] == 8000
    schema = pq.read_schema(files["lineitem"][0])
    assert schema.field("l_orderkey").type == pa.int64()
    assert schema.field("l_extendedprice").type == pa.decimal128(15, 2)
    assert schema.field("l_shipdate").type == pa.date32()
    # no temp folder left beside the data
    assert [p.name for p in sf001.parent.iterdir() if p.name.startswith(".")] == []


def test_generate_with_parts_replaces_an_earlier_layout(sf001: Path, tmp_path: Path) -> None:
    out = tmp_path / "deep" / "data"
    out.mkdir(parents=True)
    for table, files in tpch.dataset_files(sf001).items():
        shutil.copy(files[0], out / f"{table}.parquet")
    (out / "notes.txt").write_text("kept")

    written = tpch.generate(SF, out, parts=3)

    files = tpch.dataset_files(out)
    assert written == [f for fs in files.values() for f in fs]
    for table, fs in files.items():
        expected_parts = 1 if table in ("region", "nation") else 3  # tpchgen-cli never splits these two
        assert [f.name for f in fs] == [f"{table}.{i}.parquet" for i in range(1, expected_parts + 1)]
        assert all(f.parent == out / table for f in fs)
        assert _rows(fs) == _rows(tpch.dataset_files(sf001)[table])
    assert sorted(p.name for p in out.iterdir()) == sorted([*tpch.TABLES, "notes.txt"])
    assert [p.name for p in out.parent.iterdir()] == ["data"]  # the temp folder is gone
    con = duckdb_over(out)
    try:
        assert con.sql(tpch.query(1, sf=SF)).to_arrow_table().num_rows == 4
    finally:
        con.close()


@pytest.mark.parametrize(
    ("sf", "parts"),
    [(0, None), (-1, None), (float("nan"), None), (float("inf"), None), ("1", None), (True, None), (1, 0), (1, -2),
     (1, 1.5), (1, True)],
)  # fmt: skip
def test_generate_rejects_bad_options(tmp_path: Path, sf: Any, parts: Any) -> None:
    with pytest.raises(OptionError) as info:
        tpch.generate(sf, tmp_path / "out", parts=parts)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()


def test_generate_reports_tool_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "fake-tpchgen"
    fake.write_text("#!/bin/sh\necho 'progress...' >&2\necho 'Error: disk on fire' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(tpch, "_tpchgen_executable", lambda: str(fake))
    out = tmp_path / "data"
    with pytest.raises(DataError, match=r"tpchgen-cli failed for SF 1: Error: disk on fire$"):
        tpch.generate(1, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake-tpchgen"]


def test_generate_reports_incomplete_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "fake-tpchgen"
    fake.write_text('#!/bin/sh\nwhile [ "$1" != "--output-dir" ]; do shift; done\nmkdir -p "$2"\nexit 0\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(tpch, "_tpchgen_executable", lambda: str(fake))
    with pytest.raises(DataError, match="incomplete dataset"):
        tpch.generate(1, tmp_path / "data")
    assert not (tmp_path / "data").exists()


def test_tpchgen_found_next_to_the_interpreter() -> None:
    exe = Path(tpch._tpchgen_executable())
    assert exe.name == "tpchgen-cli" and os.access(exe, os.X_OK)


def test_dataset_files_names_the_missing_table(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="table region not found"):
        tpch.dataset_files(tmp_path)


@pytest.mark.sf1
def test_validation_answers_at_sf1(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The spec's qualification answers (SF 1); tpchgen-cli's data reproduces dbgen's exactly."""
    con = duckdb_over(tpch_dataset(1, tmp_path_factory=tmp_path_factory))
    try:

        def run(n: int) -> list[dict[str, Any]]:
            return con.sql(tpch.query(n)).to_arrow_table().to_pylist()

        assert len(run(1)) == 4
        assert float(run(6)[0]["revenue"]) == pytest.approx(123141078.2283, abs=1e-4)
        q3 = run(3)
        assert q3[0]["l_orderkey"] == 2456423 and float(q3[0]["revenue"]) == pytest.approx(406181.0111)
        assert [len(run(n)) for n in (11, 16, 18, 20)] == [1048, 18314, 57, 186]
        assert run(15)[0]["s_suppkey"] == 8449
        assert run(21)[0] == {"s_name": "Supplier#000002829", "numwait": 20}
    finally:
        con.close()


# --- benchmark script ------------------------------------------------------------------------------------------


def _load_benchmark() -> ModuleType:
    spec = importlib.util.spec_from_file_location("squall_benchmark_tpch", ROOT / "benchmarks" / "tpch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_REAL_CONNECT = squall.connect


class _FakeResult:
    def __init__(self, table: pa.Table) -> None:
        self._table = table
        self.stats = {"elapsed_s": 0.0}

    def to_arrow(self) -> pa.Table:
        return self._table


class _FakeSquall:
    """Stands in for squall.connect(): answers with DuckDB, optionally corrupting one query's answer; plans (for
    the expected memory) with a real connection that runs nothing."""

    def __init__(
        self,
        data: str,
        workers: int | None = None,
        corrupt: str | None = None,
        corrupt_run: int = 0,
        **_: Any,
    ) -> None:
        self.con = duckdb_over(data)
        self.planner = _REAL_CONNECT(data=data, workers=workers or 1)
        self.plan = self.planner.plan
        self.workers = workers
        self.corrupt = corrupt
        self.corrupt_run = corrupt_run  # which run of the corrupted query answers wrongly (0: the warm-up)
        self.runs: dict[str, int] = {}
        self.closed = False

    def sql(self, text: str) -> _FakeResult:
        table = self.con.sql(text).to_arrow_table()
        run = self.runs[text] = self.runs.get(text, -1) + 1
        if self.corrupt and self.corrupt in text and run == self.corrupt_run:
            table = table.slice(1)
        return _FakeResult(table)

    def close(self) -> None:
        self.closed = True
        self.con.close()
        self.planner.close()


def _run_benchmark(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], corrupt: str | None = None, corrupt_run: int = 0
) -> tuple[int, str]:
    bench = _load_benchmark()
    made: list[_FakeSquall] = []

    def connect(**kwargs: Any) -> _FakeSquall:
        made.append(_FakeSquall(corrupt=corrupt, corrupt_run=corrupt_run, **kwargs))
        return made[-1]

    monkeypatch.setattr(squall, "connect", connect, raising=False)
    out = io.StringIO()
    status = bench.main(argv, out=out)
    assert all(fake.closed for fake in made)
    return status, out.getvalue()


def test_benchmark_runs_and_agrees(sf001: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["--sf", str(SF), "--data", str(sf001), "--workers", "2", "--queries", "1,6,13", "--repeat", "2"]
    status, text = _run_benchmark(monkeypatch, argv)
    header, *lines = text.strip().splitlines()
    assert status == 0, text
    assert header.startswith("DuckDB memory_limit ") and header.endswith(" MiB (Squall's local share)")
    assert [line[:3] for line in lines[:3]] == ["Q01", "Q06", "Q13"]
    assert all(
        " squall " in line and " duckdb " in line and " ratio " in line and line.endswith("  ok")
        for line in lines[:3]
    )
    assert lines[-1].startswith("geomean ratio squall/duckdb: ")


def test_benchmark_without_a_warm_up_checks_its_one_run(sf001: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["--sf", str(SF), "--data", str(sf001), "--queries", "4", "--no-warmup"]
    status, text = _run_benchmark(monkeypatch, argv, corrupt="o_orderpriority")
    assert status == 1 and "Q04" in text and "DIFFERS" in text and "timed run" not in text, text
    status, text = _run_benchmark(monkeypatch, argv)
    assert status == 0 and text.strip().splitlines()[1].endswith("  ok"), text


def test_benchmark_fails_on_a_wrong_result(sf001: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["--sf", str(SF), "--data", str(sf001), "--queries", "1,4", "--seed", "5"]
    status, text = _run_benchmark(monkeypatch, argv, corrupt="o_orderpriority")
    assert status == 1
    assert "Q01" in text and "DIFFERS" in text and "row count differs" in text


def test_benchmark_checks_every_timed_run(sf001: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong answer in the second timed run (right in the warm-up): DIFFERS, and out of the geomean."""
    argv = ["--sf", str(SF), "--data", str(sf001), "--queries", "4", "--repeat", "3"]
    status, text = _run_benchmark(monkeypatch, argv, corrupt="o_orderpriority", corrupt_run=2)
    assert status == 1, text
    assert "Q04" in text and "DIFFERS" in text and "timed run 2: " in text
    assert text.strip().splitlines()[-1] == "geomean ratio squall/duckdb: n/a", text


def test_benchmark_generates_missing_data(
    sf001: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[float, Path]] = []

    def fake_generate(sf: float, out: Path, parts: int | None = None) -> list[Path]:
        calls.append((sf, Path(out)))
        shutil.copytree(sf001, out)
        return []

    monkeypatch.setattr(tpch, "generate", fake_generate)
    data = tmp_path / "sf"
    status, text = _run_benchmark(monkeypatch, ["--sf", "0.01", "--data", str(data), "--queries", "6"])
    assert status == 0, text
    assert calls == [(0.01, data)] and "generating TPC-H SF 0.01" in text


def test_benchmark_rejects_bad_arguments(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = _load_benchmark()
    assert bench.main(["--queries", "0,23"]) == 2
    assert bench.main(["--sf", "-1"]) == 2
    assert "TPC-H queries are 1..22" in capsys.readouterr().err
