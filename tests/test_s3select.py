"""The S3 Select scan operator against moto's S3 server over HTTP.

moto implements a subset of S3 Select (CSV ``SELECT *``, JSON-lines projections, no WHERE,
``count()`` only); these tests cover what it supports end to end and check that what
it refuses fails with one clear line. The pushed-filter translation is checked as text.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

import squall
from squall.errors import DataError, OptionError
from squall.operators.s3select import pushable_filters
from squall.plan import ScanInput

from .s3server import moto_available, moto_s3

BUCKET = "squall-select"
pytestmark = pytest.mark.skipif(moto_available() is not None, reason=str(moto_available()))

ROWS = [
    {"id": i, "name": f"n{i % 7}", "price": i * 1.25, "day": f"2024-01-{1 + i % 28:02d}"} for i in range(500)
]


@pytest.fixture(scope="module")
def s3():
    with moto_s3(BUCKET) as server:
        client = server.client()
        for part in range(2):
            rows = ROWS[part * 250 : (part + 1) * 250]
            csv = "id,name,price,day\n" + "".join(
                f"{r['id']},{r['name']},{r['price']},{r['day']}\n" for r in rows
            )
            client.put_object(Bucket=BUCKET, Key=f"csv/part-{part}.csv", Body=csv.encode())
            lines = "".join(json.dumps(r) + "\n" for r in rows)
            client.put_object(Bucket=BUCKET, Key=f"json/part-{part}.json", Body=lines.encode())
        yield server


@pytest.fixture(scope="module")
def con(s3):
    with squall.connect(workers=2) as c:
        c.register("t_csv", f"s3://{BUCKET}/csv/", format="csv", scan="s3select")
        c.register("t_json", f"s3://{BUCKET}/json/", format="json", scan="s3select")
        yield c


def test_schema_from_a_sample(con):
    schema = con.catalog.table("t_csv").schema
    assert schema.names == ["id", "name", "price", "day"]
    assert pa.types.is_integer(schema.field("id").type) and pa.types.is_floating(schema.field("price").type)
    assert con.catalog.table("t_csv").scan == "s3select"


def test_csv_select_star_then_duckdb(con):
    """All columns read: ``SELECT *`` in S3 (what moto supports); aggregation in DuckDB."""
    result = con.sql(
        "SELECT name, count(*) AS n, sum(id) AS s, max(day) AS d FROM t_csv WHERE price >= 100 GROUP BY name "
        "ORDER BY name"
    )
    expected: dict[str, list] = {}
    for r in ROWS:
        if r["price"] < 100:
            continue
        e = expected.setdefault(r["name"], [0, 0, ""])
        e[0] += 1
        e[1] += r["id"]
        e[2] = max(e[2], r["day"])
    rows = result.fetchall()
    assert sum(v[0] for v in expected.values()) == 420  # the filter drops the first 80 rows
    assert [(n, c, s, str(d)) for n, c, s, d in rows] == [(k, *v) for k, v in sorted(expected.items())]
    assert result.stats["storage_requests"]["select"] == 2  # one SelectObjectContent per object
    assert "get" not in result.stats["storage_requests"]  # no object bytes read besides S3 Select


def test_json_projection_pushed(con):
    result = con.sql("SELECT sum(price) AS p, count(*) AS n FROM t_json")
    (p, n), = result.fetchall()  # fmt: skip
    assert n == 500 and p == pytest.approx(sum(r["price"] for r in ROWS))
    plan = con.plan("SELECT sum(price) FROM t_json")
    scan = next(i for s in plan.stages for i in s.inputs if isinstance(i, ScanInput))
    assert scan.scan == "s3select" and [c for c, _n in scan.columns] == ["price"]


def test_refused_expression_is_one_line(con):
    """moto refuses a CSV projection with WHERE (500): one line, naming S3 Select."""
    with pytest.raises(squall.errors.SquallError) as info:
        con.sql("SELECT id FROM t_csv WHERE name = 'n3'")
    message = str(info.value)
    assert "S3 Select refused" in message and "\n" not in message


def test_pushable_filters():
    schema = pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.float64())])
    cols = (("id", "a"), ("name", "b"), ("price", "c"))
    got = pushable_filters(
        ["a > 5", "b = 'x''y'", "b > 'q'", "c < 1.5", "a + 1 = 3", "b <> 'z'"], cols, schema, "csv"
    )
    assert got == ['CAST(s."id" AS INT) > 5', "s.\"name\" = 'x''y'", "s.\"name\" <> 'z'"]


def test_options_are_checked(s3):
    with squall.connect(workers=1) as c:
        with pytest.raises(OptionError, match="only be scanned with scan='s3select'"):
            c.register("x", f"s3://{BUCKET}/csv/", format="csv", scan="parquet")
        with pytest.raises(OptionError, match="needs an s3:// location"):
            c.register("x", "/tmp/x.csv", format="csv", scan="s3select")
        with pytest.raises(OptionError, match="format must be"):
            c.register("x", f"s3://{BUCKET}/csv/", format="xml")
        c.register("missing", f"s3://{BUCKET}/nothing/", format="csv", scan="s3select")
        with pytest.raises(DataError, match="no csv objects"):
            c.sql("SELECT * FROM missing")
