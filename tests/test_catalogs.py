"""Named Iceberg catalogs: ``squall.connect(catalogs=…)`` with pyiceberg's properties as they are — a SQL catalog
whose warehouse is on S3 (moto's server) and a Glue catalog on moto — the CLI's ``--catalog`` flag and
``[catalogs.NAME]`` in ``squall.toml``, ``squall tables`` listing them, and ``squall serve``'s backend taking
the same. Every answer is checked against pyiceberg's own reader.
"""

from __future__ import annotations

import json
import uuid

import duckdb
import pyarrow as pa
import pytest

import squall
from squall.cli import main
from squall.errors import OptionError
from squall.testing import assert_same_result
from tests.iceberg_data import NAMESPACE, build_warehouse, sql_catalog_properties
from tests.s3server import moto_available, moto_s3

BUCKET = "squall-iceberg-warehouse"
SQL = "SELECT o_status, count(*) AS n, sum(o_totalprice) AS total, count(o_note) AS notes FROM {t} " \
      "WHERE o_orderdate >= DATE '2023-03-01' GROUP BY o_status"  # fmt: skip


def _expected(props: dict[str, str], table: str = "orders", sql: str = SQL) -> pa.Table:
    from pyiceberg.catalog import load_catalog

    data = load_catalog("lake", **props).load_table(f"{NAMESPACE}.{table}").scan().to_arrow()
    con = duckdb.connect()
    con.register("ref", data)
    return con.sql(sql.format(t="ref")).to_arrow_table()


@pytest.fixture(scope="module")
def local_lake(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("catalogs")
    return build_warehouse(root)


@pytest.fixture(scope="module")
def s3():
    reason = moto_available()
    if reason is not None:
        pytest.skip(reason)
    with moto_s3(BUCKET) as server:
        yield server


def _s3_props(server) -> dict[str, str]:
    return {
        "s3.endpoint": server.endpoint_url,
        "s3.access-key-id": "testing",
        "s3.secret-access-key": "testing",
        "s3.region": "us-east-1",
    }


@pytest.mark.parametrize("workers", [1, 2])
def test_a_sql_catalog_with_its_warehouse_on_s3(s3, tmp_path_factory, workers):
    root = tmp_path_factory.mktemp("s3wh")
    props = {
        **sql_catalog_properties(root),
        "warehouse": f"s3://{BUCKET}/wh-{uuid.uuid4().hex[:8]}",
        **_s3_props(s3),
    }
    build_warehouse(root, props)
    with squall.connect(workers=workers, catalogs={"lake": props}) as con:
        got = con.sql(SQL.format(t="lake.ns.orders"))
        assert_same_result(got.arrow(), _expected(props), SQL)
        pd = "SELECT k, v FROM {t}"
        assert_same_result(con.sql(pd.format(t="lake.ns.pd")).arrow(), _expected(props, "pd", pd), pd)
        assert con.catalog.table("lake__ns__orders").files[0].startswith(f"s3://{BUCKET}/")


def test_a_glue_catalog_on_moto(s3):
    from pyiceberg.catalog import load_catalog

    prefix = uuid.uuid4().hex[:8]
    props = {
        "type": "glue",
        "glue.endpoint": s3.endpoint_url,
        "glue.region": "us-east-1",
        "warehouse": f"s3://{BUCKET}/glue-{prefix}/",
        **_s3_props(s3),
    }
    glue = load_catalog("glue", **props)
    namespace = f"db_{prefix}"
    glue.create_namespace(namespace)
    rows = pa.table({"k": pa.array(range(50), pa.int64()), "v": pa.array([f"v{i % 7}" for i in range(50)])})
    table = glue.create_table(f"{namespace}.t", schema=rows.schema)
    table.append(rows)
    table.append(rows)
    table.delete("k < 10")
    sql = f"SELECT v, count(*) AS n, sum(k) AS s FROM glue.{namespace}.t GROUP BY v"
    expected = duckdb.connect()
    expected.register("ref", glue.load_table(f"{namespace}.t").scan().to_arrow())
    with squall.connect(workers=2, catalogs={"glue": props}) as con:
        got = con.sql(sql).arrow()
        assert_same_result(got, expected.sql(sql.replace(f"glue.{namespace}.t", "ref")).to_arrow_table(), sql)
        assert sum(got.column("n").to_pylist()) == 80


def test_catalogs_are_checked_at_connect():
    with pytest.raises(OptionError, match="catalog name"):
        squall.connect(workers=1, catalogs={"not a name": {"type": "sql"}})
    with pytest.raises(OptionError, match="properties must be a mapping"):
        squall.connect(workers=1, catalogs={"lake": "sqlite:///x.db"})


def test_the_cli_catalog_flag(local_lake, capsys):
    flag = "lake=" + json.dumps(local_lake)
    sql = "SELECT o_status, count(*) AS n FROM lake.ns.orders GROUP BY o_status ORDER BY o_status"
    assert main(["query", sql, "--catalog", flag, "--workers", "2", "--format", "csv"]) == 0
    out = capsys.readouterr().out.splitlines()
    expected = _expected(local_lake, sql=sql.replace("lake.ns.orders", "{t}"))
    assert out[1:] == [
        f'"{s}",{n}' for s, n in zip(expected.column(0).to_pylist(), expected.column(1).to_pylist())
    ]
    key_values = "lake=" + ",".join(f"{k}={v}" for k, v in local_lake.items())
    assert main(["tables", "--catalog", key_values]) == 0
    listed = capsys.readouterr().out
    assert "lake.ns.orders (" in listed and "iceberg, partitioned by month(o_orderdate), snapshot " in listed
    assert "lake.ns.parts (600 rows)  iceberg, partitioned by kind, bucket(4, id), snapshot" in listed
    assert main(["query", "SELECT 1", "--catalog", "lake"]) == 1
    assert "--catalog takes NAME=JSON" in capsys.readouterr().err


def test_squall_toml_catalogs(local_lake, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    lines = ["[catalogs.lake]", *(f'{k} = "{v}"' for k, v in local_lake.items())]
    (tmp_path / "squall.toml").write_text("\n".join(lines) + "\n")
    assert main(["query", "SELECT count(*) AS n FROM lake.ns.pd", "--workers", "1", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ['"n"', "194"]
    (tmp_path / "squall.toml").write_text('catalogs = "lake"\n')
    assert main(["query", "SELECT 1", "--workers", "1"]) == 1
    assert "catalogs must be tables [catalogs.NAME]" in capsys.readouterr().err


def test_the_service_backend_takes_catalogs(local_lake):
    from squall.service.backend import LocalBackend

    backend = LocalBackend(None, workers=1, catalogs={"lake": local_lake})
    try:
        tables = {t["name"]: t for t in backend.tables()}
        assert tables["lake.ns.pd"]["rows"] == 200 and tables["lake.ns.pd"]["format"] == "iceberg"
        assert tables["lake.ns.orders"]["partitioning"] == ["month(o_orderdate)"]
        plan = backend.explain("SELECT count(*) FROM lake.ns.orders", 1)
        assert "lake__ns__orders" in plan["text"]
    finally:
        backend.close()


def test_tables_of_a_folder_beside_catalogs(local_lake, tmp_path):
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [1, 2]}), tmp_path / "plain.parquet")
    with squall.connect(str(tmp_path), workers=1, catalogs={"lake": local_lake}) as con:
        assert con.tables() == ["plain"]
        got = con.sql("SELECT count(*) AS n FROM plain JOIN lake.ns.pd ON a = k").arrow()
        assert got.column("n").to_pylist() == [2]  # k = 1 and 2 are in both files, k 1 and 2 deleted from one
        assert con.tables() == ["plain"]


def test_squall_serve_takes_the_catalog_flag(local_lake, tmp_path):
    pytest.importorskip("aws_lambda_powertools", reason="the service needs the aws extra")
    from tests.service.conftest import Server

    server = Server(["--catalog", "lake=" + json.dumps(local_lake), "--workers", "1"], tmp_path / "serve.log")
    try:
        remote = squall.connect(server.url)
        got = remote.sql("SELECT count(*) AS n FROM lake.ns.pd").arrow()
        assert got.column("n").to_pylist() == [194]
        listed = {t["name"]: t for t in remote.describe()}
        assert listed["lake.ns.orders"]["format"] == "iceberg"
    finally:
        assert server.stop() == 0, server.output()
    assert "Traceback" not in server.output()
