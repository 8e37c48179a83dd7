"""The lake suite every platform backend passes: each kind of table users keep, at W = 1 and 3, against the
format's own reader.

The lake (``tests/lake_data.py``) holds hive partitions, evolving Parquet, gzip CSV and JSON lines, a Delta
table and an Iceberg table in a pyiceberg SQL catalog, all made by the formats' own writers. Backends whose
data lives on S3 (``local-s3``, ``lambda-local``) get the files uploaded to moto and the Iceberg table written
there by pyiceberg. Each query's answer is compared with DuckDB over the same files (``read_parquet(…,
hive_partitioning, union_by_name)``, ``read_csv``, ``read_json``) and with ``deltalake`` and pyiceberg's
readers for their tables.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import squall
from squall.testing import assert_same_result
from tests.lake_data import CATALOG, build_lake, catalog_properties, reference
from tests.tpch_data import tpch_dataset

from .backends import Site

ICEBERG = "lake.ns.orders"
QUERIES = {
    "hive": "SELECT o_year, count(*) AS n, sum(o_totalprice) AS total FROM orders_by_year "
    "WHERE o_year BETWEEN 1994 AND 1996 GROUP BY o_year",
    "hive_join": "SELECT n_name, o_year, count(*) AS n FROM orders_by_year JOIN customer ON o_custkey = c_custkey "
    "JOIN nation ON c_nationkey = n_nationkey WHERE o_year = 1995 GROUP BY n_name, o_year",
    "evolving": "SELECT kind, count(*) AS n, count(amount) AS amounts, sum(id) AS ids, sum(amount) AS total "
    "FROM events GROUP BY kind",
    "csv": "SELECT l_returnflag, l_linestatus, count(*) AS n, sum(l_quantity) AS qty, min(l_shipdate) AS first "
    "FROM lineitem GROUP BY l_returnflag, l_linestatus",
    "json": "SELECT c_mktsegment, count(*) AS n, max(c_since) AS since, sum(c_acctbal) AS bal FROM customer "
    "WHERE c_since >= DATE '2020-06-01' GROUP BY c_mktsegment",
    "delta": "SELECT o_orderstatus, count(*) AS n, sum(o_totalprice) AS total FROM sales GROUP BY o_orderstatus",
    "delta_join": "SELECT c_mktsegment, count(*) AS n FROM sales JOIN customer ON o_custkey = c_custkey "
    "WHERE o_orderdate < DATE '1995-01-01' GROUP BY c_mktsegment",
    "iceberg": "SELECT o_orderstatus, count(*) AS n, count(o_note) AS notes, sum(o_totalprice) AS total "
    f"FROM {ICEBERG} WHERE o_orderdate >= DATE '1995-01-01' GROUP BY o_orderstatus",
    "iceberg_join": f"SELECT n_name, count(*) AS n FROM {ICEBERG} o JOIN customer c ON o.o_customer = c.c_custkey "
    "JOIN nation ON c.c_nationkey = n_nationkey GROUP BY n_name",
}


class _Lake:
    """The lake as one backend reads it: where its data folder is, its catalog, its reference."""

    def __init__(self, site: Site, tmp: Path) -> None:
        tpch = tpch_dataset(0.01)
        s3 = getattr(site, "s3", None)
        self.root = tmp / "lake"
        if s3 is None:
            self.data = str(build_lake(self.root, tpch))
            self.properties = catalog_properties(self.root)
        else:
            bucket, prefix = site.DATA_BUCKET, f"lake-{uuid.uuid4().hex[:8]}"  # type: ignore[attr-defined]
            s3_props = {
                "s3.endpoint": s3.endpoint_url,
                "s3.access-key-id": "testing",
                "s3.secret-access-key": "testing",
                "s3.region": "us-east-1",
            }
            warehouse = f"s3://{bucket}/{prefix}/warehouse"
            local = build_lake(self.root, tpch, warehouse, s3_props)
            client = s3.client()
            for path in sorted(p for p in local.rglob("*") if p.is_file()):
                client.upload_file(str(path), bucket, f"{prefix}/data/{path.relative_to(local)}")
            self.data = f"s3://{bucket}/{prefix}/data/"
            self.properties = catalog_properties(self.root, warehouse, s3_props)
        self.reference = reference(self.root, *self._iceberg_args())
        self._connections: dict[int, object] = {}

    def _iceberg_args(self) -> tuple[str, dict[str, str]]:
        warehouse = self.properties["warehouse"]
        if warehouse.startswith("file://"):
            return "", {}
        return warehouse, {k: v for k, v in self.properties.items() if k.startswith("s3.")}

    def connect(self, site: Site, workers: int):
        if workers not in self._connections:
            options = site.options(workers)
            self._connections[workers] = squall.connect(
                data=self.data, workers=workers, catalogs={CATALOG: self.properties}, **options
            )
        return self._connections[workers]

    def close(self) -> None:
        for con in self._connections.values():
            con.close()  # type: ignore[attr-defined]
        self.reference.close()


@pytest.fixture(scope="module")
def lake(site: Site, tmp_path_factory):
    built = _Lake(site, tmp_path_factory.mktemp(f"lake-{site.backend.name}"))
    yield built
    built.close()
    assert site.leftovers() == [], "left behind after the connections closed"


@pytest.mark.parametrize("workers", (1, 3))  # one rank; several, some reading more files than others
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_lake_table_against_its_reader(site: Site, lake: _Lake, name: str, workers: int):
    sql = QUERIES[name]
    result = lake.connect(site, workers).sql(sql)
    expected = lake.reference.sql(sql.replace(ICEBERG, "iceberg_orders")).to_arrow_table()
    assert_same_result(result.to_arrow(), expected, sql)


def _bytes_read(stats: dict) -> int:
    return int(stats["bytes_scanned"])


def test_a_partition_filter_reads_its_share(site: Site, lake: _Lake):
    """One year of seven reads at most 45 % of the full scan's bytes, and explain says what was pruned."""
    con = lake.connect(site, 2)
    full = con.sql("SELECT sum(o_totalprice) AS s FROM orders_by_year")
    year = con.sql("SELECT sum(o_totalprice) AS s FROM orders_by_year WHERE o_year = 1995")
    assert _bytes_read(year.stats) <= 0.45 * _bytes_read(full.stats), (year.stats, full.stats)
    assert "1 of 7" in con.explain("SELECT sum(o_totalprice) AS s FROM orders_by_year WHERE o_year = 1995")


def test_time_travel_against_the_readers(site: Site, lake: _Lake):
    """The first Iceberg snapshot and Delta version 0, in both syntaxes, as pyiceberg and deltalake read them."""
    import deltalake

    from tests.lake_data import ICEBERG_TABLE, NAMESPACE, iceberg_catalog

    con = lake.connect(site, 2)
    table = iceberg_catalog(lake.properties).load_table(f"{NAMESPACE}.{ICEBERG_TABLE}")
    first = min(table.snapshots(), key=lambda s: s.timestamp_ms).snapshot_id
    rows = table.scan(snapshot_id=first).to_arrow()
    got = con.sql(f"SELECT count(*) AS n, sum(o_totalprice) AS s FROM {ICEBERG} FOR VERSION AS OF {first}")
    assert got.to_arrow().to_pylist() == [
        {"n": rows.num_rows, "s": sum(rows.column("o_totalprice").to_pylist())}
    ]
    options = {}
    if lake.data.startswith("s3://"):
        endpoint = lake.properties["s3.endpoint"]
        options = {"AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1"}
    v0 = deltalake.DeltaTable(
        f"{lake.data.rstrip('/')}/sales", version=0, storage_options=options
    ).to_pyarrow_table()
    got = con.sql("SELECT count(*) AS n, sum(o_totalprice) AS s FROM sales AT (VERSION => 0)")
    assert got.to_arrow().to_pylist() == [{"n": v0.num_rows, "s": sum(v0.column("o_totalprice").to_pylist())}]
