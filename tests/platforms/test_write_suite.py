"""The write path on every platform: COPY, UNLOAD and folder tables written by every rank, committed once, read
back with DuckDB and compared with DuckDB's answer to the same query on the same files.

Backends: ``local``, ``lambda-local`` and ``fabric-tcp``, each with two writable roots, a local folder and a
prefix on moto's S3 server (relative targets go to S3 on Lambda, to the folder elsewhere; each backend also
writes the other). TPC-H SF0.01 in four parts per table, so at W > 1 several ranks hold rows and each writes
its own parts. Cases (``CASES``): a plain folder and PARTITION_BY one and two columns at W = 1..4 on every
backend; one-file Parquet, CSV .gz and JSON targets, FILE_SIZE_BYTES (several files per rank), an ORDER BY to
one file (range-partitioned over the ranks, then gathered: the order is checked), an aggregate, an empty
result (its schema kept in one empty file), JSON and gzip CSV folders — at W = 1..4 on local and at one W
each elsewhere. Each write is read back from the target (downloaded first from S3: DuckDB here has no
httpfs) with ``read_parquet(…, hive_partitioning=true, union_by_name=true)`` / ``read_csv`` / ``read_json`` —
the column types given from DuckDB's ``DESCRIBE`` of the query, so the strict comparator checks values, names
and types — and the staging folder (``.squall-staging``) must be gone after every statement, successful or
not. On S3 a folder's final listing names exactly its parts. Also: existing targets (refused, APPEND,
OVERWRITE), UNLOAD as Athena spells it, multipart uploads and copies, folder tables (CTAS, INSERT, CREATE OR
REPLACE, DROP of what Squall made only). Faults (``SQUALL_FAULTS``, see ``squall.operators.faults``): a rank
that crashes after staging its files, or when the write stage starts, fails the query and leaves nothing at
the target on local and fabric; on Lambda the rank is re-run and the target holds exactly the right rows,
one attempt's parts per rank. A run-time error leaves nothing either.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import squall
from squall.driver.options import PlannerOptions
from squall.driver.write.commit import LISTING
from squall.driver.write.folder_tables import MARKER
from squall.testing import assert_same_result
from tests.tpch_data import duckdb_over, tpch_dataset

from .backends import Backend, Site, backend_named

STAGING = ".squall-staging"
WRITE_BUCKET = "squall-write-suite"
PART_BYTES = 5 * 1024 * 1024  # S3's smallest part: the connections' multipart size (test_multipart)
#: an ORDER BY of more rows is range-partitioned over the ranks (the planner's default is 1,000,000)
RANGE_SORT_ROWS = 5000
WRITE_BACKENDS: list[Backend] = [backend_named(n) for n in ("local", "lambda-local", "fabric-tcp")]
ORDERS = "SELECT o_orderkey, o_custkey, o_orderstatus, o_totalprice, o_orderdate, o_orderpriority FROM orders"

#: name -> (query, target suffix, COPY options, format)
CASES: dict[str, tuple[str, str, str, str]] = {
    "plain": ("SELECT * FROM orders", "/", "", "parquet"),
    "partition_one": ("SELECT * FROM orders", "/", "PARTITION_BY (o_orderstatus)", "parquet"),
    "partition_two": (
        ORDERS,
        "/",
        "PARTITION_BY (o_orderstatus, o_orderpriority), FORMAT parquet",
        "parquet",
    ),
    "parquet_file": ("SELECT * FROM customer", ".parquet", "", "parquet"),
    "csv_gz_file": ("SELECT * FROM customer", ".csv.gz", "", "csv"),
    "json_file": (ORDERS + " WHERE o_orderkey % 4 = 0", ".json", "", "json"),
    "file_size": (ORDERS, "/", "ROW_GROUP_SIZE 1000, FILE_SIZE_BYTES '24KB'", "parquet"),
    "order_by": (  # range-partitioned by the sort keys (RANGE_SORT_ROWS), gathered in rank order to one file
        "SELECT o_orderkey, o_totalprice, o_orderdate FROM orders ORDER BY o_totalprice DESC, o_orderkey",
        ".parquet",
        "",
        "parquet",
    ),
    "order_by_small": (  # sorted on one rank
        "SELECT c_custkey, c_acctbal, c_name FROM customer ORDER BY c_acctbal, c_custkey",
        ".csv",
        "",
        "csv",
    ),
    "aggregate": (
        "SELECT o_orderstatus, o_orderpriority, count(*) AS n, sum(o_totalprice) AS total, "
        "min(o_orderdate) AS first FROM orders GROUP BY ALL",
        "/",
        "",
        "parquet",
    ),
    "empty": ("SELECT * FROM orders WHERE o_totalprice < 0", "/", "", "parquet"),
    "json_folder": (ORDERS, "/", "FORMAT json", "json"),
    "csv_folder": (ORDERS, "/", "FORMAT csv, COMPRESSION gzip, PARTITION_BY (o_orderstatus)", "csv"),
}
#: the part files' names in a folder written as FORMAT …
PARTS = {"parquet": "*.parquet", "json": "*.json", "csv": "*.csv.gz"}
#: the folder cases every backend runs at W = 1..4; the other cases run at W = 1..4 on local and at one W
#: each (KIND_WORKERS) on the platforms whose queries cost more
EVERY_W = ("plain", "partition_one", "partition_two")
KIND_WORKERS = {"parquet_file": 2, "csv_gz_file": 3, "json_file": 4, "file_size": 4, "order_by": 3,
                "order_by_small": 4, "aggregate": 2, "empty": 3, "json_folder": 3, "csv_folder": 2}  # fmt: skip
#: the folder tables' logic is the driver's: they are written on a local folder (local) and on S3 (Lambda)
TABLE_BACKENDS = ("local", "lambda-local")
#: the cases every rank holding rows writes (W > 1: at least two ranks write files)
SPREAD = ("plain", "partition_one", "partition_two", "file_size")


# --- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=WRITE_BACKENDS, ids=[b.name for b in WRITE_BACKENDS])
def site(request, tmp_path_factory) -> Iterator[Site]:
    """This module's backends (overrides the platform conftest's: the write path on three platforms)."""
    b: Backend = request.param
    reason = b.skip()
    if reason:
        pytest.skip(reason)
    with b.open(b, tmp_path_factory.mktemp(f"write-{b.name}")) as s:
        yield s


@pytest.fixture(scope="session")
def data(tmp_path_factory) -> Path:
    return tpch_dataset(0.01, parts=4, tmp_path_factory=tmp_path_factory)


@pytest.fixture(scope="session")
def ref(data) -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb_over(data)
    yield con
    con.close()


class Root:
    """One writable root, a local folder or an S3 prefix: what is under it, downloaded when on S3."""

    def __init__(self, url: str, tmp: Path, client: Any = None) -> None:
        self.url, self.tmp, self.client = url, tmp, client
        self.on_s3 = url.startswith("s3://")
        if self.on_s3:
            self.bucket, _, self.prefix = url.removeprefix("s3://").partition("/")
        else:
            self.folder = Path(url)
            self.folder.mkdir(parents=True, exist_ok=True)

    def keys(self, under: str = "") -> list[str]:
        """Every file under the root's ``under`` (relative to the root)."""
        if not self.on_s3:
            base = self.folder / under
            if base.is_file():
                return [under]
            found = base.rglob("*") if base.exists() else ()
            return sorted(str(p.relative_to(self.folder)) for p in found if p.is_file())
        listed = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix + under
        )
        return sorted(o["Key"][len(self.prefix) :] for page in listed for o in page.get("Contents", ()))

    def fetch(self, under: str) -> Path:
        """A local path holding what is at ``under`` (downloaded from S3 into a fresh folder)."""
        if not self.on_s3:
            return self.folder / under
        mirror = self.tmp / f"mirror-{uuid.uuid4().hex[:8]}"
        for key in self.keys(under):
            dest = mirror / key
            dest.parent.mkdir(parents=True, exist_ok=True)
            self.client.download_file(self.bucket, self.prefix + key, str(dest))
        return mirror / under

    def staging(self) -> list[str]:
        """What is left of the root's staging folder (locally the empty folder too: it should be gone)."""
        if not self.on_s3 and (self.folder / STAGING).exists():
            return [STAGING, *self.keys(STAGING)]
        return self.keys(STAGING)


class Out:
    """Where one backend writes: a local folder and an S3 prefix, both writable. Relative targets go to the
    first (``main``): S3 on Lambda, the local folder elsewhere; ``other`` is the other one."""

    def __init__(self, site: Site, tmp: Path, s3: Any, bucket: str) -> None:
        client = s3.client()  # one boto3 client for the module (making one takes a fraction of a second)
        self.local = Root(str(tmp / "out") + "/", tmp)
        self.s3 = Root(f"s3://{bucket}/{site.backend.name}-{uuid.uuid4().hex[:8]}/out/", tmp, client)
        self.main, self.other = (
            (self.s3, self.local) if site.backend.recovers_crashes else (self.local, self.s3)
        )
        self.writable = [self.main.url, self.other.url]

    @property
    def root(self) -> str:
        return self.main.url

    @property
    def on_s3(self) -> bool:
        return self.main.on_s3

    def keys(self, under: str = "") -> list[str]:
        return self.main.keys(under)

    def fetch(self, under: str) -> Path:
        return self.main.fetch(under)

    def staging(self) -> list[str]:
        """What is left in the staging folders of both roots."""
        return self.local.staging() + self.s3.staging()


@pytest.fixture(scope="module")
def out(site: Site, tmp_path_factory) -> Iterator[Out]:
    """The backend's writable roots; moto's S3 server stays up (and the AWS settings point at it) meanwhile."""
    from tests.s3server import moto_available, moto_s3

    if (reason := moto_available()) is not None:
        pytest.skip(f"moto: {reason}")

    with moto_s3(WRITE_BUCKET) as s3:
        yield Out(site, tmp_path_factory.mktemp(f"out-{site.backend.name}"), s3, WRITE_BUCKET)


@pytest.fixture(scope="module")
def cons(site: Site, data: Path, out: Out) -> Iterator[Callable[[int], squall.Connection]]:
    """Warm connections of this backend by W (opened on first use), all writing under ``out``."""
    opened: dict[int, squall.Connection] = {}

    def get(workers: int) -> squall.Connection:
        if workers not in opened:
            opened[workers] = site.connect(
                data, workers, writable=out.writable, storage_options={"part_bytes": PART_BYTES},
                planner_options=PlannerOptions(range_sort_rows=RANGE_SORT_ROWS),
            )  # fmt: skip
        return opened[workers]

    yield get
    for con in opened.values():
        con.close()
    assert site.leftovers() == [], "left behind after the connections closed"


# --- reading back ---------------------------------------------------------------------------------


def _types(ref: duckdb.DuckDBPyConnection, sql: str) -> dict[str, str]:
    return {name: kind for name, kind, *_ in ref.sql(f"DESCRIBE {sql}").fetchall()}


def _lit(text: str | Path) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def _struct(types: dict[str, str]) -> str:
    return "{" + ", ".join(f"{_lit(k)}: {_lit(v)}" for k, v in types.items()) + "}"


def read_back(
    path: Path, fmt: str, types: dict[str, str], partition_by: tuple[str, ...] = (), parts: str = ""
) -> pa.Table:
    """DuckDB's reading of what a write left at ``path`` (a folder of parts, read as the glob ``**/<parts>``
    with hive partitioning, or one file), as ``types``."""
    cols = ", ".join('"' + c + '"' for c in types)
    if path.is_dir():
        files = _lit(path / "**" / (parts or PARTS[fmt]))
        hive = {k: types[k] for k in partition_by}
        given = {k: v for k, v in types.items() if k not in hive}
        hive_types = f", hive_types={_struct(hive)}" if hive else ""
        options = f"hive_partitioning=true{hive_types}"
    else:
        files, given, options = _lit(path), types, ""
    if fmt == "parquet":
        source = f"read_parquet({files}, union_by_name=true{', ' + options if options else ''})"
    elif fmt == "csv":
        source = (
            f"read_csv({files}, header=true, columns={_struct(given)}{', ' + options if options else ''})"
        )
    else:
        source = f"read_json({files}, columns={_struct(given)}{', ' + options if options else ''})"
    con = duckdb.connect()
    try:
        return con.sql(f"SELECT {cols} FROM {source}").to_arrow_table()
    finally:
        con.close()


def _copy(sql: str, target: str, options: str) -> str:
    return f"COPY ({sql}) TO {_lit(target)}" + (f" ({options})" if options else "")


def _partition_keys(options: str) -> tuple[str, ...]:
    found = re.search(r"PARTITION_BY \(([^)]*)\)", options)
    return tuple(k.strip() for k in found.group(1).split(",")) if found else ()


def _parts_by_rank(names: list[str]) -> dict[int, set[int]]:
    """rank -> the attempts whose part files are among ``names`` (``part-<query>-r<rank>-a<attempt>-…``)."""
    found: dict[int, set[int]] = {}
    for name in names:
        m = re.search(r"part-q[0-9a-f]+-r(\d+)-a(\d+)-", name)
        if m:
            found.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    return found


def check_listing(root: Root | Out, folder: str) -> None:
    """On S3 a folder write ends with its final listing, naming exactly the parts beside it."""
    root = root.main if isinstance(root, Out) else root
    if not root.on_s3:
        return
    keys = root.keys(folder)
    listings = [k for k in keys if k.rpartition("/")[2].startswith(LISTING)]
    assert len(listings) == 1, keys
    listed = json.loads((root.fetch(listings[0])).read_bytes())
    assert sorted(folder + f for f in listed["files"]) == sorted(k for k in keys if k not in listings)


# --- COPY at W = 1..4 -----------------------------------------------------------------------------


@pytest.mark.parametrize("workers", (1, 2, 3, 4))
@pytest.mark.parametrize("case", EVERY_W)
def test_copy_against_duckdb(site: Site, out: Out, cons, ref, case: str, workers: int):
    check_copy(out, cons(workers), ref, case, f"{case}-w{workers}")


@pytest.mark.parametrize("case", sorted(KIND_WORKERS))
def test_copy_kinds_against_duckdb(site: Site, out: Out, cons, ref, case: str):
    for workers in (1, 2, 3, 4) if site.backend.name == "local" else (KIND_WORKERS[case],):
        check_copy(out, cons(workers), ref, case, f"{case}-w{workers}")


def check_copy(out: Out, con: squall.Connection, ref, case: str, base: str) -> None:
    """COPY the case's query to ``base`` + its suffix; check the result row, the files and what DuckDB reads."""
    sql, suffix, options, fmt = CASES[case]
    name = base + suffix
    result = con.sql(_copy(sql, name, options))
    status, rows, files, _bytes, target = result.fetchall()[0]
    expected = ref.sql(sql).to_arrow_table()
    assert (status, rows, target) == ("COPY", expected.num_rows, out.root + name)
    assert out.staging() == [], "the staging folder outlived the write"
    partition_by = _partition_keys(options)
    got = read_back(out.fetch(name), fmt, _types(ref, sql), partition_by)
    assert_same_result(got, expected, sql)
    written = result.stats["written"]
    assert written["rows"] == expected.num_rows and written["files"] == files, written
    if case == "order_by" and con.workers > 1:  # (the rows were sorted by every rank, then gathered)
        assert any(s.output.kind == "range" for s in result.plan.stages), result.plan.stages
    if suffix != "/":
        assert out.keys(name) == [name] and files == 1
        return
    check_listing(out, name)
    parts = [k for k in out.keys(name) if k.endswith(PARTS[fmt][1:])]
    assert len(parts) == files
    by_rank = _parts_by_rank(parts)
    assert all(len(attempts) == 1 for attempts in by_rank.values()), by_rank
    if case == "empty":  # the schema is kept: one empty file
        assert files == 1
    if partition_by:
        assert all(k.count("=") == len(partition_by) for k in parts), parts
    if case in SPREAD and con.workers > 1:
        assert len(by_rank) >= 2, f"only ranks {sorted(by_rank)} wrote"
    if case == "file_size":
        per_rank = {r["rank"]: r["files"] for r in written["per_rank"]}
        assert max(per_rank.values()) >= 2, per_rank  # several files per rank


def test_the_other_root(site: Site, out: Out, cons, ref):
    """The backend's other writable root, named by its full path or URL: S3 from local and fabric workers,
    a local folder from Lambda (the emulated functions run on this machine)."""
    sql = "SELECT * FROM orders"
    target = f"{out.other.url}other/"
    assert con_sql(cons(3), _copy(sql, target, "PARTITION_BY (o_orderstatus)"))[4] == target
    got = read_back(out.other.fetch("other"), "parquet", _types(ref, sql), ("o_orderstatus",))
    assert_same_result(got, ref.sql(sql).to_arrow_table(), sql)
    check_listing(out.other, "other/")
    assert out.staging() == []


def test_multipart(site: Site, out: Out, cons, ref):
    """A file larger than the part size is uploaded in parts by its rank and copied in parts at the commit
    (S3 gives a multipart object an ETag ending in -<parts>)."""
    sql = "SELECT * FROM lineitem"
    rows = ref.sql("SELECT count(*) FROM lineitem").fetchall()[0][0]
    assert con_sql(cons(2), _copy(sql, f"{out.s3.url}big.csv", ""))[1] == rows
    head = out.s3.client.head_object(Bucket=out.s3.bucket, Key=out.s3.prefix + "big.csv")
    assert head["ContentLength"] > PART_BYTES and re.search(r"-\d+\"?$", head["ETag"]), head
    got = read_back(out.s3.fetch("big.csv"), "csv", _types(ref, sql))
    assert_same_result(got, ref.sql(sql).to_arrow_table(), sql)
    assert out.staging() == []


def only_on(site: Site, names: tuple[str, ...], why: str) -> None:
    """Skip the test unless the backend is one of ``names`` (``why``: what the others would add nothing to)."""
    if site.backend.name not in names:
        pytest.skip(f"runs on {', '.join(names)}: {why}")


def con_sql(con: squall.Connection, sql: str) -> tuple[Any, ...]:
    return con.sql(sql).fetchall()[0]


# --- existing targets: refused, OVERWRITE, APPEND ------------------------------------------------------


def test_existing_target(site: Site, out: Out, cons, ref):
    con = cons(2)
    sql = "SELECT * FROM orders WHERE o_orderstatus = 'F'"
    con.sql(_copy(sql, "exists/", "PARTITION_BY (o_orderpriority)"))
    con.sql(_copy(sql, "exists.csv", ""))
    before = out.keys("exists")
    for target in ("exists/", "exists.csv"):
        with pytest.raises(squall.OptionError, match="already exists") as info:
            con.sql(_copy("SELECT * FROM nation", target, ""))
        assert "\n" not in str(info.value)
    assert out.keys("exists") == before and out.staging() == []

    more = "SELECT * FROM orders WHERE o_orderstatus = 'P'"
    con.sql(_copy(more, "exists/", "PARTITION_BY (o_orderpriority), APPEND"))
    both = f"{sql} UNION ALL {more}"
    types = _types(ref, sql)
    assert_same_result(
        read_back(out.fetch("exists"), "parquet", types, ("o_orderpriority",)),
        ref.sql(both).to_arrow_table(),
        both,
    )
    assert len(_parts_by_rank(out.keys("exists/"))) >= 1 and out.staging() == []

    last = "SELECT * FROM orders WHERE o_orderkey < 100"
    con.sql(_copy(last, "exists/", "OVERWRITE"))  # replaced: the partition folders of before are gone
    assert all("=" not in k for k in out.keys("exists/")), out.keys("exists/")
    if not out.on_s3:  # (S3 has no folders)
        assert [p.name for p in out.local.folder.joinpath("exists").iterdir() if p.is_dir()] == []
    assert_same_result(read_back(out.fetch("exists"), "parquet", types), ref.sql(last).to_arrow_table(), last)
    check_listing(out, "exists/")
    con.sql(_copy(last, "exists.csv", "OVERWRITE"))
    assert_same_result(read_back(out.fetch("exists.csv"), "csv", types), ref.sql(last).to_arrow_table(), last)
    assert out.staging() == []


# --- UNLOAD, as Athena spells it ---------------------------------------------------------------------


def test_unload(site: Site, out: Out, cons, ref):
    con = cons(3)
    s3 = out.s3
    sql = ORDERS + " WHERE o_orderdate < DATE '1995-01-01'"
    unload = f"UNLOAD ({sql}) TO '{s3.url}unload' WITH (format = 'PARQUET', partitioned_by = ARRAY['o_orderstatus'])"
    assert con_sql(con, unload)[:2] == ("COPY", len(ref.sql(sql).fetchall()))
    got = read_back(s3.fetch("unload"), "parquet", _types(ref, sql), ("o_orderstatus",))
    assert_same_result(got, ref.sql(sql).to_arrow_table(), sql)
    check_listing(s3, "unload/")
    con.sql(f"UNLOAD ({sql}) TO '{s3.url}unload-json/' WITH (format = 'JSON', compression = 'GZIP')")
    files = [k for k in s3.keys("unload-json/") if not k.rpartition("/")[2].startswith("_")]
    assert files and all(f.endswith(".json.gz") for f in files), files
    got = read_back(s3.fetch("unload-json"), "json", _types(ref, sql), parts="*.json.gz")
    assert_same_result(got, ref.sql(sql).to_arrow_table(), sql)
    assert out.staging() == []


# --- faults: a crashed rank, a run-time error ------------------------------------------------------------

CRASH_SQL = ORDERS


@pytest.mark.parametrize("fault", ("crash_after_write:rank=1", "crash:rank=1:stage={write}"))
def test_crashed_writer(site: Site, out: Out, cons, ref, data, monkeypatch, fault: str):
    """Rank 1 exits after staging its files (or when the write stage starts): on local and fabric the query
    fails and the target does not exist; on Lambda the rank is re-run and the target holds the right rows,
    one attempt's parts per rank (the crashed attempt's staged parts deleted)."""
    workers = 2
    options = "PARTITION_BY (o_orderstatus)"
    target = f"crash-{fault.partition(':')[0]}/"
    write_stage = cons(workers).plan(_copy(CRASH_SQL, target, options)).result_stage.id
    monkeypatch.setenv("SQUALL_FAULTS", fault.format(write=write_stage))
    extra: dict[str, Any] = {}
    if site.backend.recovers_crashes:  # notice the dead rank sooner than the emulator's default
        extra["platform_options"] = {"settings": {"dead_after_s": 3.0, "heartbeat_s": 0.5}}
    con = site.connect(data, workers, writable=out.writable, **extra)
    try:
        if site.backend.recovers_crashes:
            result = con.sql(_copy(CRASH_SQL, target, options))
            lam = result.stats["lambda"]
            assert any(r["rank"] == 1 for r in lam["relaunched"]), lam
            parts = [k for k in out.keys(target) if k.endswith(".parquet")]
            by_rank = _parts_by_rank(parts)
            assert all(len(a) == 1 for a in by_rank.values()), by_rank  # one attempt's parts per rank
            assert min(by_rank[1]) >= 1, by_rank  # rank 1's from a re-run: its first attempt crashed
            got = read_back(out.fetch(target), "parquet", _types(ref, CRASH_SQL), ("o_orderstatus",))
            assert_same_result(got, ref.sql(CRASH_SQL).to_arrow_table(), CRASH_SQL)
            check_listing(out, target)
        else:
            with pytest.raises(squall.WorkerError, match="rank 1 failed") as info:
                con.sql(_copy(CRASH_SQL, target, options))
            assert "\n" not in str(info.value)
            assert out.keys(target.rstrip("/")) == [], "a failed write left files at the target"
        assert out.staging() == [], "the staging folder outlived the write"
    finally:
        con.close()
    assert site.leftovers() == []


def test_runtime_error_leaves_nothing(site: Site, out: Out, cons):
    """A cast that fails on the rows of the later parts only: ranks that staged files before the failure
    leave nothing either."""
    con = cons(4)
    bad = "SELECT o_orderkey, CAST(CASE WHEN o_orderkey > 40000 THEN 'x' ELSE '1' END AS INTEGER) AS v FROM orders"
    for target, options in (("bad/", ""), ("bad-p/", "PARTITION_BY (v)"), ("bad.parquet", "")):
        with pytest.raises(squall.QueryRuntimeError) as info:
            con.sql(_copy(bad, target, options))
        assert "\n" not in str(info.value) and "Could not convert" in str(info.value)
        assert out.keys(target.rstrip("/")) == [], target
        assert out.staging() == []


# --- folder tables: CREATE TABLE AS, INSERT INTO, DROP TABLE --------------------------------------------


def _table_check(
    con: squall.Connection,
    out: Out,
    ref,
    table: str,
    expected_sql: str,
    partition_by=(),
    fmt: str = "parquet",
) -> None:
    """The table as Squall reads it, and its folder as DuckDB does, both equal DuckDB's ``expected_sql``."""
    expected = ref.sql(expected_sql).to_arrow_table()
    names = ", ".join(expected.column_names)
    assert_same_result(con.sql(f"SELECT {names} FROM {table}").to_arrow(), expected, expected_sql)
    parts = f"*.{fmt}"  # (uncompressed)
    got = read_back(out.fetch(table), fmt, _types(ref, expected_sql), partition_by, parts)
    assert_same_result(got, expected, expected_sql)
    assert out.keys(f"{table}/{MARKER}") == [f"{table}/{MARKER}"]
    assert out.staging() == []


def test_folder_table(site: Site, out: Out, cons, ref):
    """CTAS, INSERT positionally, by a column list (the others NULL) and BY NAME, CREATE OR REPLACE, DROP."""
    only_on(site, TABLE_BACKENDS, "the tables' logic is the driver's")
    con = cons(3)
    cols = "o_orderkey, o_custkey, o_orderstatus, o_totalprice"
    first = f"SELECT {cols} FROM orders WHERE o_orderkey % 3 = 0"
    assert con_sql(con, f"CREATE TABLE ft AS {first}")[:2] == ("CREATE TABLE", len(ref.sql(first).fetchall()))
    assert "ft" in con.tables()
    second = f"SELECT {cols} FROM orders WHERE o_orderkey % 3 = 1"
    con.sql(f"INSERT INTO ft {second}")  # positional
    con.sql("INSERT INTO ft (o_totalprice, o_orderkey) SELECT o_totalprice, o_orderkey FROM orders "
            "WHERE o_orderkey % 3 = 2 AND o_custkey < 100")  # fmt: skip
    con.sql("INSERT INTO ft BY NAME SELECT o_totalprice, o_orderstatus, o_orderkey, o_custkey FROM orders "
            "WHERE o_orderkey % 3 = 2 AND o_custkey >= 100")  # fmt: skip
    expected = (
        f"{first} UNION ALL {second} UNION ALL SELECT o_orderkey, CAST(NULL AS BIGINT) AS o_custkey, "
        "CAST(NULL AS VARCHAR) AS o_orderstatus, o_totalprice FROM orders WHERE o_orderkey % 3 = 2 AND "
        f"o_custkey < 100 UNION ALL SELECT {cols} FROM orders WHERE o_orderkey % 3 = 2 AND o_custkey >= 100"
    )
    _table_check(con, out, ref, "ft", expected)

    con.sql("CREATE OR REPLACE TABLE ft AS SELECT n_nationkey, n_name FROM nation")
    _table_check(con, out, ref, "ft", "SELECT n_nationkey, n_name FROM nation")
    assert con_sql(con, "DROP TABLE ft")[0] == "DROP TABLE"
    assert out.keys("ft") == [] and "ft" not in con.tables()
    assert con_sql(con, "DROP TABLE IF EXISTS ft")[0] == "DROP TABLE (absent)"


def test_partitioned_folder_table(site: Site, out: Out, cons, ref):
    """PARTITIONED BY two columns; INSERTs keep the table's partition folders; replaced by another partitioning."""
    only_on(site, TABLE_BACKENDS, "the tables' logic is the driver's")
    con = cons(2)
    first = (
        "SELECT o_orderkey, o_totalprice, o_orderpriority, o_orderstatus FROM orders WHERE o_orderkey < 30000"
    )
    con.sql(f"CREATE TABLE pt PARTITIONED BY (o_orderpriority, o_orderstatus) AS {first}")
    assert all(k.count("=") == 2 for k in out.keys("pt/") if k.endswith(".parquet"))
    # the partition columns come last, as in Athena: positional INSERT follows the table's order
    second = "SELECT o_orderkey, o_totalprice, o_orderpriority, o_orderstatus FROM orders WHERE o_orderkey >= 30000"
    con.sql(f"INSERT INTO pt {second}")
    con.sql("INSERT INTO pt BY NAME SELECT 'Z' AS o_orderstatus, 7 AS o_orderkey, '9-NEW' AS o_orderpriority, "
            "1.5 AS o_totalprice")  # fmt: skip
    expected = f"{first} UNION ALL {second} UNION ALL SELECT 7, CAST(1.5 AS DECIMAL(15,2)), '9-NEW', 'Z'"
    _table_check(con, out, ref, "pt", expected, ("o_orderpriority", "o_orderstatus"))
    assert any("o_orderstatus=Z" in k for k in out.keys("pt/"))
    # replaced by a table partitioned otherwise: only the new partition folders are left
    replaced = "SELECT o_orderkey, o_orderpriority, o_orderstatus FROM orders WHERE o_orderkey < 1000"
    con.sql(f"CREATE OR REPLACE TABLE pt PARTITIONED BY (o_orderstatus) AS {replaced}")
    _table_check(con, out, ref, "pt", replaced, ("o_orderstatus",))
    assert all(
        k.split("/")[1].startswith("o_orderstatus=") for k in out.keys("pt/") if k.endswith(".parquet")
    )
    if not out.on_s3:
        assert sorted(p.name for p in (out.local.folder / "pt").iterdir() if p.is_dir()) == [
            "o_orderstatus=F", "o_orderstatus=O", "o_orderstatus=P"
        ]  # fmt: skip
    con.sql("DROP TABLE pt")
    assert out.keys("pt") == []


def test_text_folder_tables(site: Site, out: Out, cons, ref):
    """A JSON lines table: DuckDB's glob of its files (``jt/*.json``) reads the rows and nothing else; a CSV
    table partitioned by a column: INSERT writes into its partition folders, as CTAS did (refused on S3)."""
    only_on(site, TABLE_BACKENDS, "the tables' logic is the driver's")
    con = cons(2)
    first = "SELECT o_orderkey, o_orderdate, o_comment FROM orders WHERE o_orderkey < 20000"
    con.sql(f"CREATE TABLE jt WITH (format = 'json') AS {first}")
    second = "SELECT o_orderkey, o_orderdate, o_comment FROM orders WHERE o_orderkey >= 50000"
    con.sql(f"INSERT INTO jt {second}")
    _table_check(con, out, ref, "jt", f"{first} UNION ALL {second}", fmt="json")
    con.sql("DROP TABLE jt")
    cols = "o_orderkey, o_orderdate, o_orderstatus"  # types CSV's sniffer gives back as they were
    first = f"SELECT {cols} FROM orders WHERE o_orderkey < 20000"
    create = f"CREATE TABLE ct PARTITIONED BY (o_orderstatus) WITH (format = 'csv') AS {first}"
    if out.on_s3:  # read from copies of its files, a text table on S3 would lose its key=value columns
        with pytest.raises(squall.NotSupportedError, match="partition a Parquet table there"):
            con.sql(create)
        assert out.keys("ct") == []
        return
    con.sql(create)
    second = f"SELECT {cols} FROM orders WHERE o_orderkey >= 50000"
    con.sql(f"INSERT INTO ct {second}")
    assert all(k.count("=") == 1 for k in out.keys("ct/") if k.endswith(".csv")), out.keys("ct/")
    _table_check(con, out, ref, "ct", f"{first} UNION ALL {second}", ("o_orderstatus",), fmt="csv")
    con.sql("DROP TABLE ct")


def test_drop_only_what_squall_made(site: Site, out: Out, cons):
    """A folder registered by hand (no marker) is neither replaced nor dropped; its files stay."""
    only_on(site, TABLE_BACKENDS, "the tables' logic is the driver's")
    con = cons(2)
    con.sql(_copy("SELECT * FROM region", "handmade/", ""))
    before = out.keys("handmade/")
    con.register("handmade", out.root + "handmade/")
    with pytest.raises(squall.UnsafeQueryError, match="not made by Squall") as info:
        con.sql("DROP TABLE handmade")
    assert "\n" not in str(info.value)
    with pytest.raises(squall.UnsafeQueryError, match="not made by Squall"):
        con.sql("CREATE OR REPLACE TABLE handmade AS SELECT 1 AS x")
    assert out.keys("handmade/") == before and out.staging() == []
