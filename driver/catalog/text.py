"""CSV and newline-delimited JSON tables: the ``csv``/``json`` table sources and the ``text`` scan kind's loader.

A location is one file, a folder of such files or a glob, local or on an object store
(:mod:`squall.driver.catalog.listing`; suffixes ``.csv``, ``.tsv``, ``.json``, ``.jsonl``,
``.ndjson``, each optionally ``.gz`` or ``.zst``). The driver reads metadata only:

- **schema**: DuckDB's sniffer over the first :data:`SNIFF_FILES` files, reconciled by name
  as DuckDB's ``union_by_name`` does (``read_csv([...], union_by_name=true)``): the types are
  exactly DuckDB's (a date stays DATE). A local file is sniffed where it is; an object is
  sniffed from a sample: the whole object when at most :data:`SAMPLE_BYTES`, else its first
  :data:`SAMPLE_BYTES` (decompressed when gzip, or zstd with the ``zstandard`` module, else the
  whole object), cut after its last line end. A file past the first :data:`SNIFF_FILES`
  with another column is refused by the worker reading it (one line naming the file);
- **rows**: counted by DuckDB in the first file when it is at most :data:`SAMPLE_BYTES`, else
  estimated from its first :data:`SAMPLE_BYTES` (bytes as stored per line); the other files'
  from their sizes;
- **splits**: one "row group" per file (no byte ranges: a file is read whole by one rank),
  with no min/max statistics (nothing is pruned).

The worker half is :mod:`squall.operators.text_scan`. Local tables are stamped with their
files' sizes and mtimes. ``TableInfo.source_notes`` says the format, the files and their
compression.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import tempfile
import threading
import zlib
from collections.abc import Hashable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import duckdb
import pyarrow as pa

from squall.driver.catalog.info import ColumnChunkStats, RowGroup, TableInfo
from squall.driver.catalog.listing import FILE_FORMATS, file_format, list_entries
from squall.driver.catalog.source import SourceFile, TableSource, open_source
from squall.errors import DataError, NotSupportedError, OptionError
from squall.operators.duck import ident
from squall.operators.storage import Storage, scheme_of, storage_for
from squall.operators.text_scan import (
    CSV_OPTIONS,
    compression_of,
    connection,
    local_copy,
    one_line,
    reader_sql,
)

#: files whose schemas are sniffed (and reconciled by name); later files must fit
SNIFF_FILES = 32
#: bytes of an object fetched to sniff it (the whole object when smaller), and to estimate line lengths
SAMPLE_BYTES = 1024 * 1024
#: a guess of (uncompressed) bytes per line when nothing else tells
GUESS_LINE_BYTES = 100.0
#: a guess of the compression ratio of a compressed file whose first bytes cannot be decompressed here
GUESS_RATIO = 4.0


class TextSource(TableSource):
    """CSV or JSON-lines files (see the module doc); ``kind`` is the format."""

    kind = "text"
    fmt = "csv"
    what = "CSV"

    def __init__(self, name: str, location: str, storage: Storage) -> None:
        super().__init__(name, location, storage)
        self._lock = threading.RLock()
        self._files: tuple[SourceFile, ...] | None = None
        self._info: TableInfo | None = None
        #: DuckDB read_csv options overriding the sniffer (set by the loader; see TextTables.check_options)
        self.options: dict[str, Any] = {}

    def files(self) -> tuple[SourceFile, ...]:
        """The table's files (listed once)."""
        with self._lock:
            if self._files is None:
                entries = list_entries(
                    self.storage, self.location, suffixes=FILE_FORMATS[self.fmt], what=self.what
                )
                self._files = tuple(SourceFile(e.path, e.size) for e in entries)
            return self._files

    def file_schema(self, path: str) -> pa.Schema:
        """DuckDB's sniffed schema of one file."""
        size = next((f.size for f in self.files() if f.path == path), None)
        with _sample(self.storage, path, size) as local:
            return _sniff(self.fmt, [(path, local)], self.options)[0]

    def schema(self) -> pa.Schema:
        """The first files' sniffed schemas, united by name (DuckDB's ``union_by_name``)."""
        return self.table_info().schema

    def statistics(self) -> tuple[RowGroup, ...]:
        return self.table_info().row_groups

    def table_info(self) -> TableInfo:
        """Schema sniffed, rows estimated, one row group per file (once)."""
        files = self.files()
        with self._lock:
            if self._info is None:
                self._info = self._load(files)
            return self._info

    def _load(self, files: tuple[SourceFile, ...]) -> TableInfo:
        sniffed = files[:SNIFF_FILES]
        with ExitStack() as stack:
            samples = [(f.path, stack.enter_context(_sample(self.storage, f.path, f.size))) for f in sniffed]
            schema, types = _sniff(self.fmt, samples, self.options)
            first_rows = (
                _count(self.fmt, *samples[0], self.options) if files[0].size <= SAMPLE_BYTES else None
            )
        stored, text = _line_bytes(self.storage, files[0])
        if first_rows:  # the first file counted: its rows exact, its line length for the others
            stored, text = files[0].size / first_rows, text / stored * files[0].size / first_rows
        width = max(len(schema), 1)
        groups = []
        for i, f in enumerate(files):
            rows = (
                (first_rows if i == 0 and first_rows is not None else math.ceil(f.size / stored))
                if f.size
                else 0
            )
            stats = ColumnChunkStats(None, None, None, f.size // width, int(rows * text) // width)
            groups.append(RowGroup(f.path, 0, rows, {c: stats for c in schema.names}))
        compressions = sorted({compression_of(f.path) for f in files})
        notes = (
            ("format", self.fmt),
            ("files", str(len(files))),
            ("compression", ",".join(compressions)),
            ("schema", f"sniffed by DuckDB from {len(sniffed)} of {len(files)} files"),
            ("split", "by file"),
        )
        options = (
            ("format", self.fmt),
            ("options", json.dumps(self.options, sort_keys=True)),
            ("types", json.dumps(types)),
        )
        return TableInfo(
            self.name, self.location, tuple(f.path for f in files), schema, tuple(groups), {}, "text",
            options, source_notes=notes,
        )  # fmt: skip

    def stamp(self) -> Hashable | None:
        """Local tables: (path, size and mtime) of every file, () when there are none; else None."""
        if scheme_of(self.location) != "file":
            return None
        uncounted = storage_for(self.location, self.storage.options)
        try:
            entries = list_entries(uncounted, self.location, suffixes=FILE_FORMATS[self.fmt], what=self.what)
        except (DataError, NotSupportedError):
            return ()
        return tuple((e.path, e.stamp) for e in entries)


class CsvSource(TextSource):
    """CSV files (header, delimiter and quoting sniffed by DuckDB; gzip or zstd compressed)."""

    kind = "csv"
    fmt = "csv"
    what = "CSV"


class JsonSource(TextSource):
    """Newline-delimited JSON files (gzip or zstd compressed)."""

    kind = "json"
    fmt = "json"
    what = "JSON"


def _sniff(
    fmt: str, samples: Sequence[tuple[str, str]], options: Mapping[str, Any]
) -> tuple[pa.Schema, dict[str, str]]:
    """(Arrow schema, DuckDB type per column) of the local ``samples`` ((path, local copy)), united by name."""
    compressions = {compression_of(local) for _path, local in samples}
    with connection() as con:
        try:
            if len(compressions) == 1:
                call = reader_sql(fmt, [local for _p, local in samples], compression=compressions.pop(), options=options,
                                  union_by_name=len(samples) > 1)  # fmt: skip
                rel = con.sql(f"SELECT * FROM {call} LIMIT 0")
            else:  # DuckDB takes one compression per call: a union by name of one call per file
                rel = con.sql(
                    " UNION ALL BY NAME ".join(
                        f"SELECT * FROM {reader_sql(fmt, [local], compression=compression_of(local), options=options)}"
                        for _p, local in samples
                    )
                    + " LIMIT 0"
                )
            names, kinds = rel.columns, [str(t) for t in rel.types]
            empty = ", ".join(f"CAST(NULL AS {k}) AS {ident(n)}" for n, k in zip(names, kinds))
            schema = con.sql(f"SELECT {empty} LIMIT 0").to_arrow_table().schema  # the file is not read again
        except duckdb.Error as exc:
            for one in samples if len(samples) > 1 else ():  # name the file that fails alone
                _sniff(fmt, [one], options)
            path, local = samples[0] if len(samples) == 1 else (", ".join(p for p, _l in samples[:3]), "")
            raise DataError(one_line(path, exc, local)) from None
    types = {n: ("VARCHAR" if k == "NULL" else k) for n, k in zip(names, kinds)}
    fields = [f.with_type(pa.string()) if pa.types.is_null(f.type) else f for f in schema]
    return pa.schema(fields), types


@contextmanager
def _sample(storage: Storage, path: str, size: int | None) -> Iterator[str]:
    """A local file DuckDB can sniff for ``path``: the file itself (local), the whole object when small, else
    the object's first :data:`SAMPLE_BYTES` decompressed and cut after the last line end."""
    if scheme_of(path) == "file":
        yield path.removeprefix("file://")
        return
    size = storage.size(path) if size is None else size
    prefix = storage.read_ranges(path, [(0, SAMPLE_BYTES)])[0] if size > SAMPLE_BYTES else None
    text = _decompress_prefix(prefix, compression_of(path)) if prefix is not None else None
    if not text or b"\n" not in text:  # nothing decompressed here (zstd's blocks can outgrow the prefix)
        with local_copy(storage, path, size) as local:
            yield local
        return
    text = text[: _record_end(text, quoted=path_format(path) == "csv")]
    fd, local = tempfile.mkstemp(prefix="squall-sniff-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(text)
        yield local
    finally:
        os.unlink(local)


def path_format(path: str) -> str:
    """``csv`` or ``json`` by the file's suffix (``csv`` when neither)."""
    found = file_format(path)
    return found[0] if found else "csv"


def _record_end(text: bytes, *, quoted: bool) -> int:
    """The length of ``text`` up to its last complete line: after the last line end outside double quotes
    (``quoted``: CSV, where a quoted field may hold line ends; a doubled quote keeps the count even)."""
    if not quoted:
        return text.rindex(b"\n") + 1 if b"\n" in text else len(text)
    end, inside = len(text), False
    for i, byte in enumerate(text):
        if byte == 0x22:
            inside = not inside
        elif byte == 0x0A and not inside:
            end = i + 1
    return end


def _decompress_prefix(prefix: bytes, compression: str) -> bytes | None:
    """The text at the start of a compressed prefix (None when it cannot be decompressed here)."""
    if compression == "none":
        return prefix
    if compression == "gzip":
        try:
            return zlib.decompressobj(wbits=47).decompress(prefix)
        except zlib.error:
            return None
    try:
        zstandard: Any = importlib.import_module("zstandard")  # optional: not a dependency
    except ImportError:
        return None
    try:
        return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(prefix))
    except zstandard.ZstdError:
        return None


def _line_bytes(storage: Storage, first: SourceFile) -> tuple[float, float]:
    """(bytes as stored, bytes of text) per line of the first file, from its first :data:`SAMPLE_BYTES`."""
    ratio = 1.0 if compression_of(first.path) == "none" else GUESS_RATIO
    if first.size == 0:
        return GUESS_LINE_BYTES / ratio, GUESS_LINE_BYTES
    n = min(first.size, SAMPLE_BYTES)
    prefix = storage.read_ranges(first.path, [(0, n)])[0]
    text = _decompress_prefix(prefix, compression_of(first.path))
    if not text or b"\n" not in text:  # undecodable here: a guess, compressed about 4:1
        return GUESS_LINE_BYTES / ratio, GUESS_LINE_BYTES
    lines = text.count(b"\n") + (0 if text.endswith(b"\n") or n < first.size else 1)
    return max(len(prefix) / lines, 1.0), max(len(text) / lines, 1.0)


def _count(fmt: str, path: str, local: str, options: Mapping[str, Any]) -> int:
    """The rows of one (small) file, counted by DuckDB."""
    with connection() as con:
        try:
            call = reader_sql(fmt, [local], compression=compression_of(local), options=options)
            return int(con.sql(f"SELECT count(*) FROM {call}").fetchall()[0][0])
        except duckdb.Error as exc:
            raise DataError(one_line(path, exc, local)) from None


class TextTables:
    """The loader of the ``text`` scan kind (see :mod:`squall.driver.catalog.scan_kinds`): CSV and JSON-lines
    files read by DuckDB in the workers (:mod:`squall.operators.text_scan`), on any storage."""

    formats = ("csv", "json")
    schemes = None

    @staticmethod
    def load(
        name: str, location: str, storage: Storage, fmt: str, options: Mapping[str, Any] | None = None
    ) -> TableInfo:
        source = open_source(fmt, name, location, storage)
        if options and isinstance(source, TextSource):
            source.options = dict(options)
        return source.table_info()

    @staticmethod
    def check_options(fmt: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` checked: DuckDB ``read_csv`` options of :data:`CSV_OPTIONS` for CSV tables, with
        text, integer or boolean values; OptionError naming what is not."""
        if fmt != "csv":
            raise OptionError(f"{fmt} tables take no options (given {', '.join(sorted(options))})")
        unknown = sorted(set(options) - set(CSV_OPTIONS))
        if unknown:
            raise OptionError(f"unknown CSV option {unknown[0]!r} (choose from {', '.join(CSV_OPTIONS)})")
        for key, value in options.items():
            if not isinstance(value, (str, int, bool)):
                raise OptionError(f"CSV option {key} must be text, a number or true/false, not {value!r}")
        return dict(options)


TEXT_TABLES = TextTables()
