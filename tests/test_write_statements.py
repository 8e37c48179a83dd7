"""Write statements as Squall reads them, and every write it refuses.

Parsing (``squall.driver.write.statements``): each spelling of COPY, Athena's UNLOAD, CREATE TABLE AS (with
``PARTITIONED BY`` and ``WITH (…)``), INSERT INTO (column list, ``BY NAME``, ``VALUES``) and DROP TABLE.
Options (``squall.driver.write.options``) and locations (``squall.driver.write.locations``: roots, a root
reached through a symlink, a local root on a platform whose workers cannot write it) on their own.
Refusals through a connection: outside the writable locations, ``..``, an absolute path elsewhere, a symlink
out of the writable folder, the staging folder, a file where a folder is (or the other way round), nothing
writable, bad options, ``COPY … FROM``, two result columns of one name, a PARTITION_BY column the result
lacks, tables that may not be created, written or dropped — each a one-line UserError, and nothing written
(the writable folder and the folder outside are checked afterwards). Small writes: a query reading no table,
PARTITION_BY named in another case, INSERT into a CSV table in its own dialect.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import squall
from squall.driver.write.locations import STAGING, Writable, writable_list
from squall.driver.write.options import write_options
from squall.driver.write.statements import WriteStatement, is_write, parse_write
from tests.tpch_data import tpch_dataset

# --- parsing ----------------------------------------------------------------------------------------


def _parsed(sql: str) -> WriteStatement:
    statement = parse_write(sql)
    assert statement is not None, sql
    return statement


@pytest.mark.parametrize(
    ("sql", "query", "target", "options"),
    [
        (
            "COPY (SELECT 1 AS a, 2 AS b) TO 'x/' (FORMAT parquet, PARTITION_BY (a, b), COMPRESSION zstd, OVERWRITE)",
            "SELECT 1 AS a, 2 AS b",
            "x/",
            {"FORMAT": "parquet", "PARTITION_BY": ("a", "b"), "COMPRESSION": "zstd", "OVERWRITE": True},
        ),
        (
            "COPY t TO 'x.csv' (HEADER, DELIMITER '|')",
            "SELECT * FROM t",
            "x.csv",
            {"HEADER": True, "DELIMITER": "|"},
        ),
        ("copy (select 1) to 'x.json'", "SELECT 1", "x.json", {}),
        (
            "COPY (SELECT 1) TO 'x' (PARTITION_BY a, FORMAT 'CSV')",
            "SELECT 1",
            "x",
            {"PARTITION_BY": ("a",), "FORMAT": "CSV"},
        ),
        (
            "COPY (SELECT 1) TO 'x' (FILE_SIZE_BYTES '10MB', ROW_GROUP_SIZE 1000, PER_THREAD_OUTPUT true, APPEND)",
            "SELECT 1",
            "x",
            {"FILE_SIZE_BYTES": "10MB", "ROW_GROUP_SIZE": 1000, "PER_THREAD_OUTPUT": True, "APPEND": True},
        ),
        ("/* a comment */ -- and another\n COPY (SELECT 1) TO 'a/'", "SELECT 1", "a/", {}),
        ("COPY (SELECT 1) TO 'it''s/'", "SELECT 1", "it's/", {}),
    ],
)
def test_copy_spellings(sql, query, target, options):
    assert is_write(sql)
    assert _parsed(sql) == WriteStatement("copy", query, target, options)


@pytest.mark.parametrize(
    ("sql", "query", "target", "options"),
    [
        (
            "UNLOAD (SELECT a FROM t WHERE b = 'x)') TO 's3://b/p' "
            "WITH (format = 'JSON', compression = 'GZIP', partitioned_by = ARRAY['a'])",
            "SELECT a FROM t WHERE b = 'x)'",
            "s3://b/p/",  # Athena writes a folder
            {"FORMAT": "json", "COMPRESSION": "gzip", "PARTITION_BY": ("a",)},
        ),
        (
            "UNLOAD (SELECT 1) TO 's3://b/p/' WITH (format = 'TEXTFILE', field_delimiter = ',')",
            "SELECT 1",
            "s3://b/p/",
            {"FORMAT": "csv", "DELIMITER": ",", "HEADER": False},
        ),
        (
            "unload (SELECT (1 + 2) * 3 AS x) to 's3://b/p/';",
            "SELECT (1 + 2) * 3 AS x",
            "s3://b/p/",
            {"FORMAT": "parquet"},
        ),
        (
            "UNLOAD (SELECT 1 AS x -- a comment with a ) in it\n) TO 's3://b/p/' WITH (format = 'PARQUET')",
            "SELECT 1 AS x -- a comment with a ) in it\n",
            "s3://b/p/",
            {"FORMAT": "parquet"},
        ),
        (
            "UNLOAD (SELECT 1 AS x /* ) */) TO 's3://b/p/' WITH (compression = 'SNAPPY')",
            "SELECT 1 AS x /* ) */",
            "s3://b/p/",
            {"FORMAT": "parquet", "COMPRESSION": "snappy"},
        ),
    ],
)
def test_unload_spellings(sql, query, target, options):
    assert _parsed(sql) == WriteStatement("copy", query, target, options)


def test_unload_refusals():
    with pytest.raises(squall.SqlSyntaxError, match="UNLOAD needs"):
        parse_write("UNLOAD (SELECT 1) INTO 's3://b/p/'")
    with pytest.raises(squall.SqlSyntaxError, match="not closed"):
        parse_write("UNLOAD (SELECT (1) TO 's3://b/p/'")
    with pytest.raises(squall.OptionError, match="not supported"):
        parse_write("UNLOAD (SELECT 1) TO 's3://b/p/' WITH (bucket_count = 4)")


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("CREATE TABLE t AS SELECT 1 AS a", WriteStatement("create", "SELECT 1 AS a", "t")),
        (
            "CREATE OR REPLACE TABLE t PARTITIONED BY (a, month(d)) AS SELECT 1 AS a, current_date AS d",
            WriteStatement(
                "create",
                "SELECT 1 AS a, CURRENT_DATE AS d",
                "t",
                partitioning=("a", "month(d)"),
                replace=True,
            ),
        ),
        (
            "CREATE TABLE IF NOT EXISTS lake.ns.t WITH (partitioning = ARRAY['month(d)', 'bucket(4, k)'], "
            "format = 'PARQUET', location = 'x/') AS SELECT 1",
            WriteStatement(
                "create",
                "SELECT 1",
                "lake.ns.t",
                {"FORMAT": "PARQUET", "LOCATION": "x/"},
                ("month(d)", "bucket(4, k)"),
                if_exists=True,
            ),
        ),
        (
            "CREATE TABLE t WITH (partitioned_by = ARRAY['a'], external_location = 's3://b/t/') AS SELECT 1 AS a",
            WriteStatement("create", "SELECT 1 AS a", "t", {"EXTERNAL_LOCATION": "s3://b/t/"}, ("a",)),
        ),
        ("INSERT INTO t SELECT 1", WriteStatement("insert", "SELECT 1", "t")),
        (
            "INSERT INTO t (a, b) SELECT 1, 2",
            WriteStatement("insert", "SELECT 1, 2", "t", columns=("a", "b")),
        ),
        ("INSERT INTO t BY NAME SELECT 1 AS a", WriteStatement("insert", "SELECT 1 AS a", "t", by_name=True)),
        (
            "INSERT INTO t VALUES (1, 'x'), (2, 'y')",
            WriteStatement("insert", "SELECT * FROM (VALUES (1, 'x'), (2, 'y'))", "t"),
        ),
        ("INSERT INTO lake.ns.t SELECT 1", WriteStatement("insert", "SELECT 1", "lake.ns.t")),
        ("DROP TABLE t", WriteStatement("drop", target="t")),
        ("DROP TABLE IF EXISTS lake.ns.t", WriteStatement("drop", target="lake.ns.t", if_exists=True)),
    ],
)
def test_table_statements(sql, expected):
    got = _parsed(sql)
    assert got == expected
    assert got.table_parts == tuple(expected.target.split("."))


@pytest.mark.parametrize(
    "sql", ["SELECT 1", "CREATE VIEW v AS SELECT 1", "DROP VIEW v", "WITH x AS (SELECT 1) SELECT * FROM x"]
)
def test_not_a_write(sql):
    assert parse_write(sql) is None


@pytest.mark.parametrize(
    ("sql", "error", "match"),
    [
        ("COPY nation FROM 'x.csv'", squall.UnsafeQueryError, "COPY … FROM reads files"),
        ("COPY (SELECT 1) TO 'a', 'b'", squall.SqlSyntaxError, "one target"),
        ("COPY (SELECT 1) TO 'a' (FORMAT parquet, FORMAT csv)", squall.OptionError, "given twice"),
        ("CREATE TABLE t (a INT)", squall.NotSupportedError, "without AS"),
        ("CREATE TABLE t (a INT) AS SELECT 1", squall.NotSupportedError, "name the columns in the query"),
        ("INSERT OVERWRITE t SELECT 1", squall.NotSupportedError, "INSERT OVERWRITE"),
        ("INSERT INTO t SELECT 1 RETURNING *", squall.NotSupportedError, "RETURNING"),
        ("DROP TABLE a, b", squall.NotSupportedError, "one at a time"),
    ],
)
def test_statement_refusals(sql, error, match):
    with pytest.raises(error, match=match) as info:
        parse_write(sql)
    assert "\n" not in str(info.value)


# --- options --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "target", "fmt", "single", "extension"),
    [
        ({}, "out/", "parquet", False, "parquet"),
        ({}, "out.parquet", "parquet", True, "parquet"),
        ({}, "out.csv.gz", "csv", True, "csv"),
        ({"COMPRESSION": "gzip"}, "out.csv", "csv", True, "csv.gz"),
        ({"FORMAT": "json", "COMPRESSION": "zstd"}, "out/", "json", False, "json.zst"),
        ({}, "out.ndjson", "json", True, "json"),
        ({}, "out", "parquet", True, "parquet"),  # DuckDB would say CSV; Squall's default is Parquet
        ({"PARTITION_BY": ("a",)}, "out", "parquet", False, "parquet"),
        ({"FILE_SIZE_BYTES": "1MB"}, "out", "parquet", False, "parquet"),
        ({"FILE_EXTENSION": ".pq"}, "out/", "parquet", False, "pq"),
    ],
)
def test_options(options, target, fmt, single, extension):
    got = write_options(options, target)
    assert (got.format, got.single_file, got.extension) == (fmt, single, extension)


def test_options_rendered_as_literals():
    got = write_options(
        {"HEADER": "true", "DELIMITER": "'", "FILE_SIZE_BYTES": 1000, "OVERWRITE": True}, "x.csv"
    )
    assert dict(got.passed) == {"HEADER": "true", "DELIMITER": "''''", "FILE_SIZE_BYTES": "1000"}
    assert got.mode == "OVERWRITE"


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"FOO": 1}, "option FOO is not supported"),
        ({"ROW_GROUP_SIZE": "many"}, "takes a whole number"),
        ({"ROW_GROUP_SIZE": True}, "takes a whole number"),
        ({"HEADER": "maybe", "FORMAT": "csv"}, "takes true or false"),
        ({"FILE_SIZE_BYTES": "big"}, "takes a size"),
        ({"COMPRESSION": "lzma"}, "COMPRESSION 'lzma'"),
        ({"DELIMITER": 5, "FORMAT": "csv"}, "takes a text in quotes"),
        ({"FILENAME_PATTERN": "x_{i}"}, "FILENAME_PATTERN"),
        ({"HEADER": True, "FORMAT": "parquet"}, "does not apply to FORMAT parquet"),
        ({"FORMAT": "xml"}, "FORMAT 'xml' is not supported"),
        ({"OVERWRITE": True, "APPEND": True}, "choose one of"),
    ],
)
def test_bad_options(options, match):
    with pytest.raises(squall.OptionError, match=match) as info:
        write_options(options, "out/")
    assert "\n" not in str(info.value)


# --- locations ----------------------------------------------------------------------------------------


def test_writable_roots(tmp_path):
    w = Writable([str(tmp_path / "a"), "s3://bucket/pre", "s3://other"], base=str(tmp_path))
    assert w.roots == (f"{tmp_path}/a/", "s3://bucket/pre/", "s3://other/")
    assert w.resolve("x/") == f"{tmp_path}/a/x/"
    assert w.resolve("x/y.parquet") == f"{tmp_path}/a/x/y.parquet"
    assert w.resolve("s3://bucket/pre/x/") == "s3://bucket/pre/x/"
    assert w.resolve("s3://other/deep/x.csv") == "s3://other/deep/x.csv"
    assert w.staging("s3://bucket/pre/x/") == f"s3://bucket/pre/{STAGING}/"
    assert w.staging(f"{tmp_path}/a/x/") == f"{tmp_path}/a/{STAGING}/"
    s3_first = Writable(["s3://bucket/pre/"])
    assert s3_first.resolve("x/") == "s3://bucket/pre/x/"
    for outside in ("s3://bucket/prefix2/x/", "s3://bucket/x/", f"{tmp_path}/b/x/", "/etc/x/"):
        with pytest.raises(squall.UnsafeQueryError, match="outside the writable locations"):
            w.resolve(outside)
    with pytest.raises(squall.UnsafeQueryError, match="only local folders and s3://"):
        w.resolve("http://example.com/x/")
    assert writable_list("a/, s3://b/p/") == ["a/", "s3://b/p/"]
    assert writable_list(None) == [] and writable_list(["a"]) == ["a"]
    assert not Writable([]) and not Writable(["  "])


def test_writable_root_through_a_symlink(tmp_path):
    """A root given through a symlinked folder (macOS' /tmp) accepts targets spelled either way."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real)
    w = Writable([str(tmp_path / "alias")])
    assert w.roots == (f"{real}/",)
    assert w.resolve(f"{tmp_path}/alias/x/") == f"{real}/x/"
    assert w.resolve(f"{real}/x/") == f"{real}/x/"


def test_writable_where_the_workers_can_write(tmp_path):
    """Lambda functions see no folder of this machine: a local writable location is refused at connect."""
    with pytest.raises(squall.OptionError, match="lambda platform's workers write to s3:// locations only"):
        squall.connect(
            platform="lambda", exchange="s3://bucket/x/", writable=[str(tmp_path), "s3://bucket/out/"]
        )
    with squall.connect(platform="lambda-local", exchange="s3://bucket/x/", writable=[str(tmp_path)]) as con:
        assert con.writable.roots == (f"{tmp_path}/",)  # the emulated functions run on this machine


def test_bad_writable_locations(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(squall.OptionError, match="is a file"):
        Writable([str(tmp_path / "file")])
    with pytest.raises(squall.OptionError, match="give a local folder or s3://"):
        Writable(["http://example.com/x/"])
    with pytest.raises(squall.OptionError, match=r"may not contain '\.\.'"):
        Writable(["s3://bucket/a/../b/"])


# --- refusals through a connection: nothing written ---------------------------------------------------


@pytest.fixture(scope="module")
def sf001(tmp_path_factory):
    return tpch_dataset(0.01, tmp_path_factory=tmp_path_factory)


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """A writable folder, a folder outside it, and a symlink inside pointing out."""
    base = tmp_path_factory.mktemp("writes")
    (base / "out").mkdir()
    (base / "outside").mkdir()
    (base / "out" / "link").symlink_to(base / "outside")
    (base / "out" / "link.parquet").symlink_to(base / "outside" / "x.parquet")
    (base / "out" / "a-folder").mkdir()
    (base / "out" / "a-file.csv").write_text("x\n1\n")
    return base


@pytest.fixture(scope="module")
def con(sf001, place):
    c = squall.connect(str(sf001), workers=2, writable=[str(place / "out")])
    yield c
    c.close()


def _everything(base: Path) -> list[str]:
    return sorted(str(p.relative_to(base)) for p in base.rglob("*"))


REFUSED = [
    (
        "COPY (SELECT * FROM nation) TO '/tmp/squall-elsewhere/x/'",
        squall.UnsafeQueryError,
        "outside the writable",
    ),
    ("COPY (SELECT * FROM nation) TO '{outside}/x/'", squall.UnsafeQueryError, "outside the writable"),
    ("COPY (SELECT * FROM nation) TO '../outside/x/'", squall.UnsafeQueryError, "may not contain '..'"),
    (
        "COPY (SELECT * FROM nation) TO 'a/../../outside/x.csv'",
        squall.UnsafeQueryError,
        "may not contain '..'",
    ),
    ("COPY (SELECT * FROM nation) TO 'link/x/'", squall.UnsafeQueryError, "through a symlink"),
    ("COPY (SELECT * FROM nation) TO 'link/'", squall.UnsafeQueryError, "through a symlink"),
    ("COPY (SELECT * FROM nation) TO 'link.parquet'", squall.UnsafeQueryError, "through a symlink"),
    ("COPY (SELECT * FROM nation) TO '{staging}/x/'", squall.UnsafeQueryError, "staging folder"),
    ("COPY (SELECT * FROM nation) TO 's3://bucket/x/'", squall.UnsafeQueryError, "outside the writable"),
    (
        "COPY (SELECT * FROM nation) TO 'https://example.com/x/'",
        squall.UnsafeQueryError,
        "only local folders",
    ),
    ("COPY (SELECT * FROM nation) TO 'a-folder'", squall.OptionError, "a-folder is a folder: end the target"),
    ("COPY (SELECT * FROM nation) TO 'a-folder' (OVERWRITE)", squall.OptionError, "is a folder"),
    ("COPY (SELECT * FROM nation) TO 'a-file.csv/' (OVERWRITE)", squall.OptionError, "a-file.csv is a file"),
    ("COPY (SELECT * FROM nation) TO 'a-file.csv/x.csv'", squall.OptionError, "cannot be written below it"),
    ("COPY (SELECT * FROM nation) TO 'a-file.csv'", squall.OptionError, "already exists: add OVERWRITE"),
    ("COPY (SELECT * FROM nation) TO 'x/' (FOO 1)", squall.OptionError, "option FOO is not supported"),
    ("COPY (SELECT * FROM nation) TO 'x/' (ROW_GROUP_SIZE 'many')", squall.OptionError, "whole number"),
    ("COPY (SELECT * FROM nation) TO 'x/' (OVERWRITE 'perhaps')", squall.OptionError, "true or false"),
    (
        "COPY (SELECT * FROM nation) TO 'x/' (FILENAME_PATTERN 'f_{{i}}')",
        squall.OptionError,
        "FILENAME_PATTERN",
    ),
    ("COPY (SELECT * FROM nation) TO 'x.csv' (APPEND)", squall.OptionError, "APPEND adds files to a folder"),
    ("COPY nation FROM '{outside}/x.csv'", squall.UnsafeQueryError, "COPY … FROM"),
    ("COPY (SELECT n_name, n_name FROM nation) TO 'x/'", squall.BindError, "two columns named 'n_name'"),
    ("COPY (SELECT n_name AS a, n_comment AS A FROM nation) TO 'x/'", squall.BindError, "two columns named"),
    (
        "COPY (SELECT * FROM nation) TO 'x/' (PARTITION_BY (n_size))",
        squall.BindError,
        "PARTITION_BY column 'n_size'",
    ),
    ("COPY (SELECT n_name FROM nation) TO 'x/' (PARTITION_BY (n_name))", squall.BindError, "every column"),
    ("COPY (SELECT * FROM nowhere) TO 'x/'", squall.BindError, "nowhere"),
    ("CREATE TABLE nation AS SELECT 1 AS a", squall.BindError, "already exists"),
    (
        "CREATE TABLE t WITH (location = '{outside}/t/') AS SELECT 1 AS a",
        squall.UnsafeQueryError,
        "outside the writable",
    ),
    (
        "CREATE TABLE t PARTITIONED BY (month(d)) AS SELECT current_date AS d, 1 AS a",
        squall.NotSupportedError,
        "Iceberg",
    ),
    ("CREATE TABLE t WITH (table_type = 'ICEBERG') AS SELECT 1 AS a", squall.NotSupportedError, "catalog"),
    ("CREATE TABLE t WITH (bucket_count = 4) AS SELECT 1 AS a", squall.OptionError, "BUCKET_COUNT"),
    (
        "INSERT INTO nation SELECT * FROM nation",
        squall.NotSupportedError,
        "is a file or a glob, not a folder",
    ),
    ("INSERT INTO nowhere SELECT 1", squall.BindError, "unknown table"),
    ("DROP TABLE nation", squall.UnsafeQueryError, "outside the writable"),
    ("DROP TABLE nowhere", squall.BindError, "unknown table"),
    ("DROP TABLE a.b", squall.NotSupportedError, "table name a.b"),
]


@pytest.mark.parametrize(("sql", "error", "match"), REFUSED, ids=[f"r{i:02d}" for i in range(len(REFUSED))])
def test_refused_and_nothing_written(con, place, sql, error, match):
    before = _everything(place)
    sql = sql.format(outside=place / "outside", staging=STAGING)
    with pytest.raises(error, match=match) as info:
        con.sql(sql)
    assert isinstance(info.value, squall.UserError) and "\n" not in str(info.value), repr(info.value)
    assert _everything(place) == before
    with pytest.raises(error, match=match):  # explain plans the same statement: the same refusal
        con.explain(sql)


def test_nothing_writable(sf001, place):
    with squall.connect(str(sf001), workers=1) as c:
        for sql in (
            f"COPY (SELECT * FROM nation) TO '{place}/out/x/'",
            "COPY (SELECT * FROM nation) TO 'x/'",
            "CREATE TABLE t AS SELECT 1 AS a",
            "UNLOAD (SELECT 1 AS a) TO 's3://bucket/x/'",
        ):
            with pytest.raises(squall.UnsafeQueryError, match="writing is not enabled") as info:
                c.sql(sql)
            assert "\n" not in str(info.value)
    assert not (place / "out" / "x").exists() and not any((place / "outside").iterdir())


def test_table_in_a_folder_not_made_by_squall(con, place):
    """CREATE TABLE onto a folder that exists (made by hand, or by another session) says how to proceed."""
    (place / "out" / "kept").mkdir()
    (place / "out" / "kept" / "data.csv").write_text("a\n1\n")
    with pytest.raises(squall.OptionError, match="kept/ already exists") as info:
        con.sql("CREATE TABLE kept AS SELECT 1 AS a")
    assert "CREATE" in str(info.value) and "OVERWRITE" not in str(info.value)
    assert os.listdir(place / "out" / "kept") == ["data.csv"]


def test_small_writes(con, place):
    """A query reading no table, a table COPY and PARTITION_BY named in another case are written too."""
    out = place / "out"
    assert con.sql("COPY (SELECT 42 AS x, 'a' AS y) TO 'small/one.csv'").fetchall()[0][:3] == ("COPY", 1, 1)
    assert (out / "small" / "one.csv").read_text() == "x,y\n42,a\n"
    assert con.sql("COPY nation TO 'small/nation/' (PARTITION_BY (N_REGIONKEY))").fetchall()[0][:2] == (
        "COPY",
        25,
    )
    assert sorted(os.listdir(out / "small" / "nation")) == [f"n_regionkey={k}" for k in range(5)]
    assert not (out / STAGING).exists()


def test_insert_writes_a_csv_tables_dialect(con, place):
    """INSERT into a CSV table registered with reading options writes files those options read; the table
    keeps its options afterwards."""
    folder = place / "out" / "pipes"
    folder.mkdir()
    (folder / "first.csv").write_text("a|b\n1|x\n2|NA\n")
    con.register("pipes", str(folder), format="csv", options={"delim": "|", "header": True, "nullstr": "NA"})
    con.sql("INSERT INTO pipes VALUES (3, NULL), (4, 'y')")
    (written,) = [p for p in folder.iterdir() if p.name != "first.csv"]
    assert written.read_text() == "a|b\n3|NA\n4|y\n"
    assert con.sql("SELECT a, b FROM pipes ORDER BY a").fetchall() == [
        (1, "x"),
        (2, None),
        (3, None),
        (4, "y"),
    ]
    con.register("skipping", str(folder), format="csv", options={"delim": "|", "skip": 1})
    with pytest.raises(squall.NotSupportedError, match="skips 1 line"):
        con.sql("INSERT INTO skipping VALUES (5, 'z')")
