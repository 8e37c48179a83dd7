"""Named catalogs: Iceberg catalogs pyiceberg opens (SQL, REST, Glue, Hive, …), their tables addressed in SQL as
``<catalog>.<namespace>.<table>``.

A connection is given catalogs by name with pyiceberg's own properties, as they are
(``squall.connect(..., catalogs={"lake": {"type": "sql", "uri": "sqlite:///…", "warehouse": "file:///…"}})``,
``[catalogs.lake]`` in ``squall.toml``, ``--catalog lake=…``). Nothing is opened at connect: a catalog is
loaded (``pyiceberg.catalog.load_catalog(name, **properties)``) when a query first names one of its tables,
and each table is registered in the connection's :class:`~squall.driver.catalog.tables.Catalog` on first use
under a flat internal name (:func:`flat_name`), its source an
:class:`~squall.driver.catalog.iceberg.IcebergSource` that asks the catalog for the table's current metadata
(the stamp: a new commit is seen by the next query).

Metadata tables: ``"<t>$snapshots"`` (and ``$files``, ``$partitions``, ``$history``, ``$manifests``,
``$refs``) of any Iceberg table, in a catalog or a data folder, are small Arrow tables carried in the plan
(scan kind ``arrow``: :mod:`squall.operators.arrow_scan`).
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from squall.driver.catalog.iceberg import METADATA_TABLES, IcebergSource
from squall.driver.catalog.info import RowGroup, TableInfo
from squall.driver.catalog.source import TableSource, require_lake
from squall.errors import DataError, OptionError

if TYPE_CHECKING:
    from squall.driver.catalog.tables import Catalog

#: a catalog name: an SQL identifier
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def flat_name(*parts: str) -> str:
    """The internal table name of ``catalog.namespace.table`` (what plans and workers call it)."""
    return "__".join(parts)


def parse_catalog_flag(text: str) -> tuple[str, dict[str, str]]:
    """``NAME=JSON`` or ``NAME=key=value,key=value`` (the CLI's ``--catalog``) as (name, properties)."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep or not _NAME.match(name):
        raise OptionError(f"--catalog takes NAME=JSON or NAME=key=value,…, not {text!r}")
    rest = rest.strip()
    if rest.startswith("{"):
        try:
            props = json.loads(rest)
        except json.JSONDecodeError as err:
            raise OptionError(f"--catalog {name}: properties are not JSON: {err}") from None
        if not isinstance(props, dict):
            raise OptionError(f"--catalog {name}: properties must be a JSON object")
        return name, {str(k): str(v) for k, v in props.items()}
    props = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise OptionError(f"--catalog {name}: expected key=value, not {item!r}")
        props[key.strip()] = value.strip()
    return name, props


def check_catalogs(catalogs: Mapping[str, Any] | None) -> dict[str, dict[str, str]]:
    """The ``catalogs`` option checked: names are identifiers, properties a mapping of text (with a ``type``
    or ``uri`` pyiceberg can go by)."""
    out: dict[str, dict[str, str]] = {}
    for name, props in (catalogs or {}).items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise OptionError(f"catalog name {name!r}: use letters, digits and _")
        if not isinstance(props, Mapping):
            raise OptionError(
                f"catalog {name}: properties must be a mapping (pyiceberg's catalog properties)"
            )
        out[name.lower()] = {str(k): str(v) for k, v in props.items()}
    return out


class NamedCatalogs:
    """The connection's named catalogs, each opened on first use (see the module doc)."""

    def __init__(self, catalogs: Mapping[str, Mapping[str, str]]) -> None:
        self.properties = check_catalogs(catalogs)
        self._opened: dict[str, Any] = {}
        self._table_locations: dict[tuple[str, str, str], str] = {}  # a table's folder, asked once
        self._lock = threading.Lock()

    def __contains__(self, name: str) -> bool:
        return name.lower() in self.properties

    def names(self) -> list[str]:
        return sorted(self.properties)

    def catalog(self, name: str) -> Any:
        """The pyiceberg catalog ``name`` (loaded once; DataError naming it when it cannot be)."""
        key = name.lower()
        if key not in self.properties:
            known = ", ".join(self.names()) or "none"
            raise DataError(f"unknown catalog {name} (catalogs: {known})")
        with self._lock:
            if key not in self._opened:
                require_lake("catalog " + name, "pyiceberg")
                from pyiceberg.catalog import load_catalog

                try:
                    self._opened[key] = load_catalog(key, **self.properties[key])
                except Exception as exc:  # pyiceberg raises many kinds for bad properties
                    raise DataError(f"cannot open catalog {name}: {exc}".splitlines()[0]) from None
            return self._opened[key]

    def load_table(self, catalog: str, namespace: str, table: str) -> Any:
        """The catalog's table now (its current metadata); DataError naming what is unknown."""
        opened = self.catalog(catalog)  # OptionError first when pyiceberg is missing
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            return opened.load_table((namespace, table))
        except NoSuchTableError:
            if not _namespace_exists(opened, namespace):
                raise DataError(f"catalog {catalog} has no namespace {namespace}") from None
            tables = sorted(t[-1] for t in opened.list_tables(namespace))
            raise DataError(
                f"catalog {catalog} has no table {namespace}.{table} (tables: {', '.join(tables) or 'none'})"
            ) from None
        except NoSuchNamespaceError:
            raise DataError(f"catalog {catalog} has no namespace {namespace}") from None

    def forget(self, parts: tuple[str, str, str]) -> None:
        """Forget what was asked of table ``parts`` (its location): it was dropped or replaced."""
        with self._lock:
            self._table_locations.pop(parts, None)

    def tables(self) -> list[tuple[str, str, str]]:
        """Every (catalog, namespace, table) of every catalog (for listings)."""
        out = []
        for name in self.names():
            opened = self.catalog(name)
            for namespace in opened.list_namespaces():
                for ident in opened.list_tables(namespace):
                    out.append((name, ".".join(namespace), ident[-1]))
        return sorted(out)

    def source(self, catalog: Catalog, parts: tuple[str, str, str]) -> IcebergSource:
        """An IcebergSource of table ``parts`` that asks the catalog for its current metadata."""
        name = flat_name(*parts)
        with self._lock:
            location = self._table_locations.get(parts)
        if location is None:  # fails here, with its message, when the table is not there
            location = self.load_table(*parts).location()
            with self._lock:
                self._table_locations[parts] = location
        storage = catalog.storage(location)
        return IcebergSource(name, location, storage, loader=lambda: self.load_table(*parts))


def _namespace_exists(opened: Any, namespace: str) -> bool:
    try:
        return any(".".join(ns) == namespace for ns in opened.list_namespaces())
    except Exception:
        return False


def resolve(catalog: Catalog, parts: tuple[str, ...], metadata: str | None) -> str:
    """The internal name of table ``parts`` (``(catalog, namespace, table)`` of a named catalog, or
    ``(table,)`` of the connection), with its metadata table ``metadata`` (``snapshots``…) when given;
    registered in ``catalog`` on first use. DataError naming the unknown catalog, namespace or table."""
    if len(parts) == 3:
        named = catalog.catalogs
        if named is None or parts[0] not in named:
            known = ", ".join(named.names()) if named is not None else ""
            raise DataError(f"unknown catalog {parts[0]} (catalogs: {known or 'none given'})")
        base = flat_name(*(p.lower() for p in parts))
        if base not in catalog:
            key = (parts[0], parts[1], parts[2])
            location = named.source(catalog, key).location
            catalog.register_source(
                base, lambda: named.source(catalog, key), format="iceberg", location=location
            )
    else:
        base = parts[0]
    if metadata is None:
        return base
    name = f"{base}${metadata}"
    if name not in catalog:
        if metadata not in METADATA_TABLES:
            raise DataError(
                f"unknown metadata table ${metadata} (there are: {', '.join('$' + k for k in METADATA_TABLES)})"
            )
        if base not in catalog:
            raise DataError(f"unknown table {base} (in {name})")
        catalog.register_source(name, lambda: MetadataSource(name, catalog.source(base), metadata), format="iceberg",
                                location=catalog.location(base) or "")  # fmt: skip
    return name


class MetadataSource(TableSource):
    """A metadata table of an Iceberg table (``$snapshots``…): one small Arrow table in the plan."""

    kind = "iceberg"

    def __init__(self, name: str, base: TableSource, metadata: str) -> None:
        super().__init__(name, base.location, base.storage)
        if not isinstance(base, IcebergSource):
            raise DataError(
                f"{name}: ${metadata} tables are of Iceberg tables, and {base.name} is a {base.kind} table"
            )
        self.base, self.metadata = base, metadata
        self._info: TableInfo | None = None

    def _table(self) -> pa.Table:
        return _plain(self.base.metadata_table(self.metadata))

    def files(self) -> tuple:
        return ()

    def file_schema(self, path: str) -> pa.Schema:
        return self.schema()

    def schema(self) -> pa.Schema:
        return self.table_info().schema

    def statistics(self) -> tuple[RowGroup, ...]:
        return self.table_info().row_groups

    def table_info(self) -> TableInfo:
        if self._info is None:
            table = self._table()
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            ipc = base64.b64encode(sink.getvalue().to_pybytes()).decode()
            path = f"arrow:{self.name}"
            group = RowGroup(path, 0, table.num_rows, {})
            self._info = TableInfo(self.name, self.location, (path,), table.schema, (group,), scan="arrow",
                                   scan_options=(("ipc", ipc),),
                                   source_notes=(("format", f"iceberg ${self.metadata}"),))  # fmt: skip
        return self._info

    def stamp(self) -> Any:
        return self.base.stamp()


def _plain(table: pa.Table) -> pa.Table:
    """Large strings and binaries as plain ones, nothing else changed (what every reader takes)."""
    fields = []
    for f in table.schema:
        t = f.type
        t = pa.string() if pa.types.is_large_string(t) else pa.binary() if pa.types.is_large_binary(t) else t
        fields.append(pa.field(f.name, t, f.nullable))
    return table.cast(pa.schema(fields))
