"""The write path's surfaces in the SDK and the CLI (issue 33): ``--writable`` (flag, comma lists,
``writable = [...]`` in squall.toml), write statements' one-row summary, refusals as one line with exit 1 and
nothing written, ``query --output`` run as a COPY by the workers (a folder, ``.csv.gz``, JSON, ``s3://`` on
moto's server), and ``Result.write_parquet``/``write_csv``. Everything written is read back by DuckDB and
compared with DuckDB's own answer (TPC-H SF0.01)."""

from __future__ import annotations

import gzip
import io
import json
import os

import duckdb
import pyarrow.parquet as pq
import pytest

import squall
from squall.cli import main
from squall.testing import assert_same_result

from .s3server import moto_available, moto_s3

ORDERS = "SELECT o_orderkey, o_custkey, o_orderstatus, o_totalprice, o_orderdate FROM orders"


def read_back(path, *, fmt: str = "parquet", columns: str = "*") -> object:
    """What DuckDB reads from ``path`` (a file, or a folder with hive partitions)."""
    con = duckdb.connect()
    if fmt == "parquet":
        source = f"read_parquet('{path}', hive_partitioning = true, union_by_name = true)"
    elif fmt == "csv":
        source = f"read_csv('{path}')"
    else:
        source = f"read_json('{path}')"
    try:
        return con.sql(f"SELECT {columns} FROM {source}").to_arrow_table()
    finally:
        con.close()


def one_line_error(capsys, *args: str, code: int = 1) -> str:
    assert main(list(args)) == code
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    return captured.err


def files_under(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_copy_with_writable_prints_the_summary(sf001, reference_sf001, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    sql = f"COPY ({ORDERS}) TO 'orders/' (PARTITION_BY (o_orderstatus))"
    assert main(["query", sql, "--data", str(sf001), "--workers", "2", "--writable", "out/"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [c.strip() for c in lines[0].split("|")] == ["status", "rows", "files", "bytes", "target"]
    status, rows, files, _bytes, target = (cell.strip() for cell in lines[2].split("|"))
    assert (status, rows, target) == ("COPY", "15000", str(tmp_path / "out" / "orders") + "/")
    assert int(files) == len(list((tmp_path / "out" / "orders").rglob("*.parquet"))) >= 3
    assert lines[-1] == "(1 row)"
    columns = "o_orderkey, o_custkey, o_orderstatus, o_totalprice, o_orderdate"
    assert_same_result(read_back(tmp_path / "out" / "orders" / "**" / "*.parquet", columns=columns),
                       reference_sf001.sql(ORDERS).to_arrow_table(), ORDERS)  # fmt: skip
    assert not (tmp_path / "out" / ".squall-staging").exists()

    # explain shows the write; squall.toml's writable list does what the flag does (comma lists too)
    assert main(["explain", sql.replace("orders/", "o2/"), "--data", str(sf001), "--workers", "2",
                 "--writable", "a/,out/"]) == 0  # fmt: skip
    assert "write: 2 ranks write parquet files" in capsys.readouterr().out
    (tmp_path / "squall.toml").write_text('writable = ["cfg/"]\n')
    assert main(["query", "COPY (SELECT 42 AS x) TO 'x.csv'", "--data", str(sf001), "--workers", "1"]) == 0
    assert "/cfg/x.csv" in capsys.readouterr().out and (tmp_path / "cfg" / "x.csv").read_text() == "x\n42\n"
    (tmp_path / "squall.toml").write_text("writable = 3\n")
    assert "writable must be a list" in one_line_error(capsys, "query", "SELECT 1")


@pytest.mark.parametrize(
    ("target", "flags", "message"),
    [
        ("n/", [], "writing is not enabled"),
        ("/tmp/elsewhere/n/", ["--writable", "out/"], "outside the writable locations"),
        ("../n/", ["--writable", "out/"], "may not contain '..'"),
        ("link/n/", ["--writable", "out/"], "through a symlink"),
    ],
)
def test_refused_writes_are_one_line_and_write_nothing(
    sf001, tmp_path, monkeypatch, capsys, target, flags, message
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out" / "link").symlink_to(tmp_path / "elsewhere")
    sql = f"COPY (SELECT * FROM nation) TO '{target}'"
    err = one_line_error(capsys, "query", sql, "--data", str(sf001), "--workers", "1", *flags)
    assert message in err
    assert files_under(tmp_path) == []


def test_writable_is_for_embedded_connections(capsys):
    err = one_line_error(
        capsys, "query", "SELECT 1", "--endpoint", "http://127.0.0.1:1", "--writable", "out/"
    )
    assert "--writable is for embedded connections" in err


def test_output_folder_written_by_every_worker(sf001_parts, reference_sf001, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    stats = tmp_path / "stats.json"
    args = [
        "query",
        ORDERS,
        "--data",
        str(sf001_parts),
        "--workers",
        "2",
        "--output",
        "res/",
        "--stats-json",
        str(stats),
    ]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(f"wrote 15,000 rows to {tmp_path}/res/ (")
    written = json.loads(stats.read_text())["written"]
    assert json.loads(stats.read_text())["rows"] == 15000 and written["rows"] == 15000
    assert [r["rank"] for r in written["per_rank"] if r["files"]] == [0, 1]  # each worker wrote its part
    assert files_under(tmp_path / "res") == sorted(os.path.basename(p) for p in written["paths"])
    assert_same_result(read_back(tmp_path / "res" / "*.parquet"), reference_sf001.sql(ORDERS).to_arrow_table(),
                       ORDERS)  # fmt: skip
    assert files_under(tmp_path) == ["res/" + f for f in files_under(tmp_path / "res")] + ["stats.json"]
    # an existing folder with files in it: refused before anything runs
    err = one_line_error(capsys, *args)
    assert "already holds files" in err


def test_output_csv_gz_json_and_format_checks(sf001, reference_sf001, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    base = ["query", ORDERS, "--data", str(sf001), "--workers", "2"]
    assert main([*base, "--format", "csv", "--output", "x.csv.gz"]) == 0
    raw = (tmp_path / "x.csv.gz").read_bytes()
    assert raw[:2] == b"\x1f\x8b"  # gzip, not plain text
    assert (
        gzip.decompress(raw).decode().splitlines()[0]
        == "o_orderkey,o_custkey,o_orderstatus,o_totalprice,o_orderdate"
    )
    expected = reference_sf001.sql(ORDERS).to_arrow_table()
    got = read_back(tmp_path / "x.csv.gz", fmt="csv")
    assert_same_result(got.cast(expected.schema), expected, ORDERS)
    assert main([*base, "--format", "json", "--output", "x.json"]) == 0
    rows = json.loads((tmp_path / "x.json").read_text())  # one JSON array, as --format json prints
    assert len(rows) == 15000 and set(rows[0]) == set(expected.column_names)
    assert main([*base, "--output", "x.parquet"]) == 0  # the extension decides; an existing file is replaced
    assert main([*base, "--output", "x.parquet"]) == 0
    assert pq.read_table(tmp_path / "x.parquet").num_rows == 15000
    capsys.readouterr()
    assert "--format table prints on the terminal" in one_line_error(
        capsys, *base, "--format", "table", "--output", "t.txt"
    )
    assert "names its own target" in one_line_error(
        capsys, *base[:1], "COPY (SELECT 1) TO 'y.csv'", "--output", "t.csv"
    )
    assert "syntax error" in one_line_error(capsys, "query", "SELEC 1", "--output", "t.csv")
    assert sorted(os.listdir(tmp_path)) == ["x.csv.gz", "x.json", "x.parquet"]


@pytest.mark.skipif(moto_available() is not None, reason=str(moto_available()))
def test_output_and_write_parquet_to_s3(sf001, sf001_parts, reference_sf001, tmp_path, capsys):
    with moto_s3("squall-write-out") as s3:
        client = s3.client()
        assert (
            main(
                [
                    "query",
                    ORDERS,
                    "--data",
                    str(sf001_parts),
                    "--workers",
                    "2",
                    "--output",
                    "s3://squall-write-out/cli/o/",
                ]
            )
            == 0
        )
        assert "wrote 15,000 rows to s3://squall-write-out/cli/o/" in capsys.readouterr().err
        keys = [o["Key"] for o in client.list_objects_v2(Bucket="squall-write-out")["Contents"]]
        parts = [k for k in keys if k.endswith(".parquet")]
        assert len(parts) == 2 and all(k.startswith("cli/o/part-") for k in parts), keys
        assert not any(".squall-staging" in k for k in keys)
        import pyarrow as pa

        got = pa.concat_tables(
            pq.read_table(io.BytesIO(client.get_object(Bucket="squall-write-out", Key=k)["Body"].read()))
            for k in parts
        )
        assert_same_result(got, reference_sf001.sql(ORDERS).to_arrow_table(), ORDERS)

        with squall.connect(str(sf001), workers=1) as con:
            result = con.sql("SELECT * FROM region")
            written = result.write_csv("s3://squall-write-out/py/region.csv.gz")
        body = client.get_object(Bucket="squall-write-out", Key="py/region.csv.gz")["Body"].read()
        assert written["rows"] == 5 and gzip.decompress(body).decode().startswith(
            "r_regionkey,r_name,r_comment\n"
        )


def test_result_write_parquet_csv(sf001, reference_sf001, tmp_path):
    with squall.connect(str(sf001), workers=2) as con:
        result = con.sql(ORDERS)
    expected = reference_sf001.sql(ORDERS).to_arrow_table()
    written = result.write_parquet(str(tmp_path / "o.parquet"))
    assert (
        written["rows"] == 15000
        and written["files"] == 1
        and written["target"] == str(tmp_path / "o.parquet")
    )
    assert_same_result(pq.read_table(tmp_path / "o.parquet"), expected, ORDERS)
    result.to_parquet(str(tmp_path / "o.parquet"), compression="zstd")  # a file is replaced
    assert pq.ParquetFile(tmp_path / "o.parquet").metadata.row_group(0).column(0).compression == "ZSTD"

    written = result.write_parquet(str(tmp_path / "by_status/"), partition_by=["o_orderstatus"])
    assert written["files"] == 3 and sorted(os.listdir(tmp_path / "by_status")) == [
        "o_orderstatus=F", "o_orderstatus=O", "o_orderstatus=P"]  # fmt: skip
    columns = "o_orderkey, o_custkey, o_orderstatus, o_totalprice, o_orderdate"
    assert_same_result(
        read_back(tmp_path / "by_status" / "**" / "*.parquet", columns=columns), expected, ORDERS
    )
    with pytest.raises(squall.OptionError, match="already holds files: pass mode='overwrite'"):
        result.write_parquet(str(tmp_path / "by_status"))
    assert result.write_parquet(str(tmp_path / "by_status"), mode="append")["files"] == 1
    with pytest.raises(squall.OptionError, match="partition_by column 'nope'"):
        result.write_parquet(str(tmp_path / "p2/"), partition_by=["nope"])

    result.write_csv(str(tmp_path / "o.csv.gz"))
    assert (tmp_path / "o.csv.gz").read_bytes()[:2] == b"\x1f\x8b"
    got = read_back(tmp_path / "o.csv.gz", fmt="csv")
    assert_same_result(got.cast(expected.schema), expected, ORDERS)
    assert not any(".squall-staging" in str(p) for p in tmp_path.rglob("*"))
