"""A small lake for tests: every kind of table Squall reads, each with the reference its own format gives.

:func:`build_lake` writes, from TPC-H SF0.01 (``tests/tpch_data.py``), into one folder:

- ``nation.parquet``: a plain Parquet table (joined with the others);
- ``orders_by_year/``: hive-partitioned by ``o_year`` (DuckDB ``COPY … PARTITION_BY``: the key is not in the files);
- ``events/``: evolving Parquet — a column added later, INT32 widened to INT64, columns reordered;
- ``lineitem.csv.gz`` (CSV, gzip) and ``customer.jsonl.gz`` (JSON lines, gzip);
- ``sales/``: a Delta table (deltalake) after two appends and a delete;
- ``warehouse/`` + ``catalog.db``: a pyiceberg SQL catalog holding ``ns.orders`` (month-partitioned; appends,
  a delete, an added and a renamed column).

:func:`reference` opens DuckDB over the same data as each format's own reader gives it (DuckDB for files,
``deltalake`` and pyiceberg for their tables), under the table names Squall uses, so a query's expected
answer is ``reference(lake).sql(query)``. Tables whose reader is not DuckDB are registered as Arrow tables.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

#: the pyiceberg catalog the lake's Iceberg table lives in (name, namespace, table)
CATALOG, NAMESPACE, ICEBERG_TABLE = "lake", "ns", "orders"


def build_lake(root: Path, tpch: Path, warehouse: str = "", s3: dict[str, str] | None = None) -> Path:
    """Write the lake under ``root`` from the TPC-H dataset at ``tpch``; returns ``root / "data"``.

    The Iceberg warehouse is ``root/warehouse`` unless ``warehouse`` names another (``s3://bucket/prefix``,
    with pyiceberg's ``s3.*`` properties in ``s3``); its SQL catalog stays in ``root/catalog.db``.
    """
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    for table in ("nation", "orders", "lineitem", "customer"):
        con.sql(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{tpch}/{table}.parquet')")
    con.sql(f"COPY nation TO '{data}/nation.parquet' (FORMAT parquet)")
    con.sql(
        "COPY (SELECT *, year(o_orderdate) AS o_year FROM orders) "
        f"TO '{data}/orders_by_year' (FORMAT parquet, PARTITION_BY (o_year))"
    )
    _evolving_events(con, data / "events")
    con.sql(
        f"COPY (SELECT * FROM lineitem LIMIT 20000) TO '{data}/lineitem.csv.gz' (FORMAT csv, HEADER, COMPRESSION gzip)"
    )
    con.sql(
        "COPY (SELECT c_custkey, c_name, c_nationkey, c_acctbal, c_mktsegment, DATE '2020-01-01' + c_custkey::INT "
        f"AS c_since FROM customer) TO '{data}/customer.jsonl.gz' (FORMAT json, COMPRESSION gzip)"
    )
    _delta_sales(con, data / "sales")
    _iceberg_orders(con, catalog_properties(root, warehouse, s3))
    con.close()
    return data


def _evolving_events(con: duckdb.DuckDBPyConnection, folder: Path) -> None:
    """Three files: (id INT32, kind); then (id INT64, kind, amount DOUBLE); then (amount, kind, id) reordered."""
    folder.mkdir(exist_ok=True)
    first = pa.table({"id": pa.array(range(0, 100), pa.int32()), "kind": [f"k{i % 3}" for i in range(100)]})
    second = pa.table(
        {
            "id": pa.array(range(100, 200), pa.int64()),
            "kind": [f"k{i % 4}" for i in range(100)],
            "amount": [i * 0.5 for i in range(100)],
        }
    )
    third = pa.table(
        {
            "amount": [float(i) for i in range(50)],
            "kind": pa.array([f"k{i % 2}" for i in range(50)], pa.string_view()),
            "id": pa.array(range(200, 250), pa.int64()),
        }
    )
    for i, table in enumerate((first, second, third)):
        pq.write_table(table, folder / f"part-{i}.parquet")


def _strings(table: pa.Table) -> pa.Table:
    """String views as plain strings (pyiceberg and deltalake write only ``string``)."""
    schema = pa.schema(
        [f.with_type(pa.string()) if pa.types.is_string_view(f.type) else f for f in table.schema]
    )
    return table.cast(schema)


def _delta_sales(con: duckdb.DuckDBPyConnection, folder: Path) -> None:
    import deltalake

    rows = _strings(
        con.sql(
            "SELECT o_orderkey, o_custkey, o_orderstatus, o_totalprice, o_orderdate FROM orders ORDER BY o_orderkey"
        ).to_arrow_table()
    )
    half = rows.num_rows // 2
    deltalake.write_deltalake(str(folder), rows.slice(0, half), partition_by=["o_orderstatus"])
    deltalake.write_deltalake(str(folder), rows.slice(half), mode="append")
    deltalake.DeltaTable(str(folder)).delete("o_totalprice < 50000")


def iceberg_catalog(properties: dict[str, str]):  # -> pyiceberg.catalog.Catalog
    """The lake's pyiceberg catalog, from :func:`catalog_properties`."""
    from pyiceberg.catalog import load_catalog

    return load_catalog(CATALOG, **properties)


def catalog_properties(root: Path, warehouse: str = "", s3: dict[str, str] | None = None) -> dict[str, str]:
    """pyiceberg (and ``squall.connect(catalogs={CATALOG: …})``) properties of the lake's Iceberg catalog."""
    if not warehouse:
        (root / "warehouse").mkdir(parents=True, exist_ok=True)
        warehouse = f"file://{root}/warehouse"
    return {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": warehouse, **(s3 or {})}


def _iceberg_orders(con: duckdb.DuckDBPyConnection, properties: dict[str, str]) -> None:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import MonthTransform
    from pyiceberg.types import StringType

    rows = _strings(
        con.sql(
            "SELECT o_orderkey, o_custkey, o_orderstatus, o_totalprice, o_orderdate FROM orders ORDER BY o_orderkey"
        ).to_arrow_table()
    )
    catalog = iceberg_catalog(properties)
    catalog.create_namespace(NAMESPACE)
    table = catalog.create_table(f"{NAMESPACE}.{ICEBERG_TABLE}", schema=rows.schema)
    date_id = table.schema().find_field("o_orderdate").field_id
    with table.update_spec() as spec:
        spec.add_field("o_orderdate", MonthTransform(), "o_month")
    assert isinstance(table.spec(), PartitionSpec) and all(
        isinstance(f, PartitionField) for f in table.spec().fields
    )
    assert table.spec().fields[0].source_id == date_id
    half = rows.num_rows // 2
    table.append(rows.slice(0, half))
    with table.update_schema() as update:
        update.add_column("o_note", StringType())
        update.rename_column("o_custkey", "o_customer")
    later = rows.slice(half).rename_columns(
        ["o_orderkey", "o_customer", "o_orderstatus", "o_totalprice", "o_orderdate"]
    )
    notes = pa.array([f"n{i % 5}" for i in range(later.num_rows)], pa.string())
    table = catalog.load_table(f"{NAMESPACE}.{ICEBERG_TABLE}")
    table.append(later.append_column("o_note", notes).select([f.name for f in table.schema().fields]))
    table.delete("o_totalprice < 50000")


def reference(root: Path, warehouse: str = "", s3: dict[str, str] | None = None) -> duckdb.DuckDBPyConnection:
    """DuckDB over the lake at ``root`` (see :func:`build_lake`, same arguments) as each format's own reader
    gives it."""
    import deltalake

    data = root / "data"
    con = duckdb.connect()
    con.sql(f"CREATE VIEW nation AS SELECT * FROM read_parquet('{data}/nation.parquet')")
    con.sql(
        "CREATE VIEW orders_by_year AS SELECT * FROM "
        f"read_parquet('{data}/orders_by_year/**/*.parquet', hive_partitioning = true, union_by_name = true)"
    )
    con.sql(
        f"CREATE VIEW events AS SELECT * FROM read_parquet('{data}/events/*.parquet', union_by_name = true)"
    )
    con.sql(f"CREATE VIEW lineitem AS SELECT * FROM read_csv('{data}/lineitem.csv.gz')")
    con.sql(f"CREATE VIEW customer AS SELECT * FROM read_json('{data}/customer.jsonl.gz')")
    con.register("sales", deltalake.DeltaTable(str(data / "sales")).to_pyarrow_table())
    iceberg = (
        iceberg_catalog(catalog_properties(root, warehouse, s3))
        .load_table(f"{NAMESPACE}.{ICEBERG_TABLE}")
        .scan()
        .to_arrow()
    )
    con.register("iceberg_orders", iceberg)
    return con
