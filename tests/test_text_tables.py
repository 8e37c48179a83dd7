"""CSV and newline-delimited JSON tables (scan kind ``text``), locally and on S3 (moto), against DuckDB.

Every answer is compared with DuckDB reading the same local files (``read_csv``, ``read_json``;
a folder with ``union_by_name=true``), order-insensitive, with the same column types.
"""

from __future__ import annotations

import csv
import datetime as dt
import gzip
import io
import json
import random
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import squall
from squall.cli import main
from squall.errors import SquallError

from .s3server import moto_available, moto_s3

BUCKET = "squall-text"
STATUSES = ["open", "done", "late"]
NOTES = ["plain", "with, comma", 'say "hi"', "two\nlines", "semi;colon", ""]


def _orders(n: int, seed: int, first: int = 0) -> list[dict]:
    rnd = random.Random(seed)
    rows = []
    for i in range(first, first + n):
        day = dt.date(2024, 1, 1) + dt.timedelta(days=rnd.randrange(200))
        rows.append(
            {
                "o_id": i,
                "o_cust": rnd.randrange(1, 8),
                "o_date": day.isoformat() if i % 17 else "",
                "o_ts": f"{day.isoformat()} {rnd.randrange(24):02d}:{rnd.randrange(60):02d}:00",
                "o_total": f"{rnd.randrange(100, 100000) / 100:.2f}",
                "o_note": NOTES[i % len(NOTES)],
                "o_status": STATUSES[i % 3],
            }
        )
    return rows


def _csv_text(rows: list[dict], columns: list[str]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _jsonl(rows: list[dict]) -> bytes:
    out = []
    for r in rows:
        doc = {"e_id": r["o_id"], "e_day": r["o_date"] or None, "e_at": r["o_ts"], "e_kind": r["o_status"],
               "e_amount": float(r["o_total"]), "e_tag": None if r["o_id"] % 5 else r["o_note"]}  # fmt: skip
        out.append(json.dumps(doc) + "\n")
    return "".join(out).encode()


COLUMNS = ["o_id", "o_cust", "o_date", "o_ts", "o_total", "o_note", "o_status"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("text")
    rows = _orders(300, 1)
    text = _csv_text(rows, COLUMNS)
    (root / "orders.csv").write_text(text)
    (root / "orders_gz.csv.gz").write_bytes(gzip.compress(text.encode()))
    con = duckdb.connect()
    con.sql(f"COPY (SELECT * FROM read_csv('{root / 'orders.csv'}')) TO '{root / 'orders_zst.csv.zst'}' "
            "(FORMAT csv, HEADER, COMPRESSION zstd)")  # fmt: skip
    (root / "events.jsonl").write_bytes(_jsonl(rows))
    (root / "events_gz.json.gz").write_bytes(gzip.compress(_jsonl(_orders(120, 2))))
    parts = root / "parts"
    parts.mkdir()
    (parts / "p0.csv").write_text(_csv_text(_orders(100, 3, 1000), COLUMNS))
    (parts / "p1.csv").write_text(_csv_text(_orders(80, 4, 2000), COLUMNS[:-1]))  # no o_status
    extra = [dict(r, o_flag=r["o_id"] % 2) for r in _orders(60, 5, 3000)]
    (parts / "p2.csv").write_text(_csv_text(extra, ["o_flag", *reversed(COLUMNS)]))  # reordered, one more
    pq.write_table(pa.table({"c_id": list(range(1, 8)), "c_name": [f"cust{i}" for i in range(1, 8)]}),
                   root / "customers.parquet")  # fmt: skip
    return root


#: table -> (the DuckDB reader of its local files, relative location, format)
TABLES = {
    "orders": ("read_csv('{root}/orders.csv')", "orders.csv", "csv"),
    "orders_gz": ("read_csv('{root}/orders_gz.csv.gz')", "orders_gz.csv.gz", "csv"),
    "orders_zst": ("read_csv('{root}/orders_zst.csv.zst')", "orders_zst.csv.zst", "csv"),
    "parts": ("read_csv('{root}/parts/*.csv', union_by_name=true)", "parts", "csv"),
    "events": ("read_json('{root}/events.jsonl', format='newline_delimited')", "events.jsonl", "json"),
    "events_gz": (
        "read_json('{root}/events_gz.json.gz', format='newline_delimited')",
        "events_gz.json.gz",
        "json",
    ),
}
ORDER_QUERIES = [
    "SELECT * FROM {t}",
    "SELECT o_status, count(*) AS n, round(sum(o_total), 2) AS s, min(o_date) AS d0, max(o_ts) AS t1, "
    "count(o_note) AS notes FROM {t} WHERE o_date >= DATE '2024-03-01' GROUP BY o_status",
    "SELECT c.c_name, count(*) AS n, round(sum(o.o_total), 2) AS s FROM {t} o JOIN customers c "
    "ON o.o_cust = c.c_id WHERE o.o_note LIKE '%,%' OR o.o_note LIKE '%\n%' GROUP BY c.c_name",
]
EVENT_QUERIES = [
    "SELECT * FROM {t}",
    "SELECT e_kind, count(*) AS n, min(e_day) AS d, max(e_at) AS a, round(sum(e_amount), 2) AS s, "
    "count(e_tag) AS tags FROM {t} WHERE e_day < DATE '2024-05-01' GROUP BY e_kind",
]


def _queries(table: str) -> list[str]:
    return [q.format(t=table) for q in (EVENT_QUERIES if table.startswith("events") else ORDER_QUERIES)]


def _expected(root: Path, table: str, sql: str) -> pa.Table:
    con = duckdb.connect()
    for name, (reader, _rel, _fmt) in TABLES.items():
        con.sql(f"CREATE VIEW {name} AS SELECT * FROM {reader.format(root=root)}")
    con.sql(f"CREATE VIEW customers AS SELECT * FROM read_parquet('{root}/customers.parquet')")
    return con.sql(sql).to_arrow_table()


def _same(got: pa.Table, want: pa.Table) -> None:
    assert got.schema.names == want.schema.names
    assert got.schema.types == want.schema.types, (got.schema, want.schema)
    key = [(n, "ascending") for n in want.schema.names]
    assert got.sort_by(key).to_pylist() == want.sort_by(key).to_pylist()


@pytest.fixture(scope="module", params=[1, 2])
def local_con(request, data):
    with squall.connect(workers=request.param) as con:
        for name, (_reader, rel, fmt) in TABLES.items():
            con.register(name, str(data / rel), format=fmt)
        con.register("customers", str(data / "customers.parquet"))
        yield con


@pytest.mark.parametrize("table", list(TABLES))
def test_local_answers_match_duckdb(local_con, data, table):
    assert local_con.catalog.table(table).scan == "text"
    for sql in _queries(table):
        _same(local_con.sql(sql).to_arrow(), _expected(data, table, sql))


def test_types_are_duckdbs(local_con):
    schema = local_con.catalog.table("orders").schema
    assert [str(t) for t in schema.types] == ["int64", "int64", "date32[day]", "timestamp[us]", "double",
                                              "string", "string"]  # fmt: skip
    events = local_con.catalog.table("events_gz").schema
    assert events.field("e_day").type == pa.date32() and events.field("e_at").type == pa.timestamp("us")
    parts = local_con.catalog.table("parts").schema  # united by name: every column of every file
    assert set(parts.names) == {*COLUMNS, "o_flag"}


def test_stats_and_explain(local_con, data):
    result = local_con.sql("SELECT count(*) AS n FROM parts")
    assert result.fetchall() == [(240,)]
    stats = result.stats
    assert stats["rows_scanned"] == 240
    assert stats["storage_requests"]["files"] == 3
    assert stats["bytes_scanned"] == sum(p.stat().st_size for p in (data / "parts").iterdir())
    text = local_con.explain("SELECT count(*) FROM orders_gz")
    assert "1 csv files (text), split by file" in text
    info = local_con.catalog.table("orders_gz")
    assert dict(info.source_notes)["compression"] == "gzip" and info.num_rows == 300  # a small file: counted


def test_malformed_files_are_one_line_naming_the_file(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,c\n" + "".join(f"{i},x{i},{i * 2}\n" for i in range(30000)) + "1,2,3,4,5\n")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"a": 1}\n{"a": 2\n')
    with squall.connect(workers=1) as con:
        con.register("bad", str(bad), format="csv")
        con.register("broken", str(broken), format="json")
        for table, path in (("bad", bad), ("broken", broken)):
            with pytest.raises(SquallError) as info:
                con.sql(f"SELECT count(*) FROM {table}")
            message = str(info.value)
            assert str(path) in message and "\n" not in message.strip(), message


def test_cli_query_on_a_folder_with_gzipped_csv(capsys, data, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "orders.csv.gz").write_bytes((data / "orders_gz.csv.gz").read_bytes())
    (folder / "events.ndjson").write_bytes((data / "events.jsonl").read_bytes())
    assert main(["query", "SELECT count(*) AS n, min(o_date) AS d FROM orders", "--data", str(folder),
                 "--workers", "1", "--format", "csv"]) == 0  # fmt: skip
    (want,) = duckdb.sql(f"SELECT min(o_date) FROM read_csv('{folder}/orders.csv.gz')").fetchall()[0]
    assert capsys.readouterr().out.splitlines() == ['"n","d"', f"300,{want}"]
    assert main(["query", "SELECT count(*) AS n FROM events WHERE e_day IS NULL", "--data", str(folder),
                 "--workers", "1", "--format", "csv"]) == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines() == ['"n"', str(sum(1 for i in range(300) if i % 17 == 0))]


# --- on S3 (moto) ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_con(data):
    if (why := moto_available()) is not None:
        pytest.skip(why)
    with moto_s3(BUCKET) as server:
        client = server.client()
        for path in data.rglob("*"):
            if path.is_file():
                client.put_object(Bucket=BUCKET, Key=f"lake/{path.relative_to(data)}", Body=path.read_bytes())
        with squall.connect(data=f"s3://{BUCKET}/lake/", workers=2) as con:
            yield con


def test_s3_discovery_and_answers(s3_con, data):
    assert set(s3_con.tables()) == {*TABLES, "customers"}
    for table in TABLES:
        assert s3_con.catalog.table(table).scan == "text"
        for sql in _queries(table):
            _same(s3_con.sql(sql).to_arrow(), _expected(data, table, sql))


def test_s3_bytes_are_fetched_through_the_storage(s3_con, data):
    result = s3_con.sql("SELECT count(*) AS n FROM orders_zst")
    assert result.fetchall() == [(300,)]
    assert result.stats["storage_requests"] == {"files": 1, "get": 1}  # one ranged GET, no HEAD
    assert result.stats["bytes_scanned"] == (data / "orders_zst.csv.zst").stat().st_size


def test_s3_empty_object_in_a_folder(s3_con):
    client = s3_con.catalog.storage(f"s3://{BUCKET}/").client
    client.put_object(Bucket=BUCKET, Key="empty/a.csv", Body=b"a\n1\n2\n")
    client.put_object(Bucket=BUCKET, Key="empty/b.csv", Body=b"")
    s3_con.register("with_empty", f"s3://{BUCKET}/empty/", format="csv")
    assert s3_con.sql("SELECT count(*), sum(a) FROM with_empty").fetchall() == [(2, 3)]


def test_s3_objects_larger_than_the_sample(s3_con, data, monkeypatch):
    """Objects over SAMPLE_BYTES are sniffed from their first bytes (gzip decompressed); types stay DuckDB's."""
    import squall.driver.catalog.text as text

    monkeypatch.setattr(text, "SAMPLE_BYTES", 2048)
    for table in ("orders", "orders_gz", "orders_zst", "events_gz"):
        _reader, rel, fmt = TABLES[table]
        assert (data / rel).stat().st_size > 2048
        s3_con.register(f"big_{table}", f"s3://{BUCKET}/lake/{rel}", format=fmt)
        sql = _queries(table)[1].replace(f"FROM {table}", f"FROM big_{table}")
        _same(s3_con.sql(sql).to_arrow(), _expected(data, table, _queries(table)[1]))
        info = s3_con.catalog.table(f"big_{table}")
        assert info.schema == s3_con.catalog.table(table).schema
        assert 100 <= info.num_rows <= 1000  # estimated from the sample's lines


def test_s3_malformed_objects_are_one_line_naming_the_object(s3_con):
    client_put = s3_con.catalog.storage(f"s3://{BUCKET}/").client.put_object
    client_put(Bucket=BUCKET, Key="bad/json/a.jsonl", Body=b'{"a": 1}\n')
    client_put(Bucket=BUCKET, Key="bad/json/b.jsonl", Body=b'{"a": 2\n')
    rows = "a,b,c\n" + "".join(f"{i},x{i},{i * 2}\n" for i in range(30000)) + "1,2,3,4,5\n"
    client_put(Bucket=BUCKET, Key="bad/csv/c.csv.gz", Body=gzip.compress(rows.encode()))
    s3_con.register("bad_json", f"s3://{BUCKET}/bad/json/", format="json")
    s3_con.register("bad_csv", f"s3://{BUCKET}/bad/csv/", format="csv")
    for table, key in (("bad_json", "bad/json/b.jsonl"), ("bad_csv", "bad/csv/c.csv.gz")):
        with pytest.raises(SquallError) as info:
            s3_con.sql(f"SELECT count(*) FROM {table}")
        message = str(info.value)
        assert f"cannot read s3://{BUCKET}/{key}:" in message and "squall-text-" not in message, message
        assert "\n" not in message.strip(), message


def test_a_changed_local_file_is_read_again(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a\n1\n2\n")
    with squall.connect(workers=1) as con:
        con.register("t", str(path), format="csv")
        assert con.sql("SELECT sum(a) FROM t").fetchall() == [(3,)]
        path.write_text("a,b\n1,x\n2,y\n3,z\n")
        assert con.sql("SELECT sum(a), max(b) FROM t").fetchall() == [(6, "z")]


def test_csv_options_override_the_sniffer(tmp_path):
    path = tmp_path / "pairs.txt.csv"
    path.write_text("x|y\nz|'w|v'\n")
    options = {"delim": "|", "header": False, "quote": "'"}
    want = duckdb.sql(
        f"SELECT * FROM read_csv('{path}', delim='|', header=false, quote='''')"
    ).to_arrow_table()
    assert want.num_rows == 2 and want.column_names == ["column0", "column1"]
    with squall.connect(workers=1) as con:
        con.register("pairs", str(path), format="csv", options=options)
        _same(con.sql("SELECT * FROM pairs").to_arrow(), want)
        con.register("sniffed", str(path), format="csv")  # the sniffer alone: a header line
        assert con.sql("SELECT count(*) FROM sniffed").fetchall() == [(1,)]
        with pytest.raises(squall.errors.OptionError, match="unknown CSV option 'sep'"):
            con.register("bad", str(path), format="csv", options={"sep": ";"})
        with pytest.raises(squall.errors.OptionError, match="json tables take no options"):
            con.register("bad", str(path), format="json", options={"delim": ";"})


def test_a_file_past_the_sniffed_ones_with_another_column_is_refused(tmp_path, monkeypatch):
    import squall.driver.catalog.text as text

    monkeypatch.setattr(text, "SNIFF_FILES", 1)
    (tmp_path / "a.csv").write_text("k,v\n1,x\n")
    (tmp_path / "b.csv").write_text("k,v,w\n2,y,3\n")
    with squall.connect(workers=1) as con:
        con.register("t", str(tmp_path), format="csv")
        assert con.catalog.table("t").schema.names == ["k", "v"]
        with pytest.raises(SquallError, match=r"cannot read .*b\.csv: column w is not in the table"):
            con.sql("SELECT count(*) FROM t")
