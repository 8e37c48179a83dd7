"""Metadata mirrors: local sparse copies of object-store Parquet files holding only their footer and indexes.

DuckDB reads Bloom filters and page indexes (:mod:`squall.driver.skipping.page_index`) but
only from local files here (no httpfs). A mirror is a sparse local file of the object's
size with the real bytes where DuckDB will read them and holes (zeros, no disk) elsewhere:

- the first 4 bytes (``PAR1``) and the footer (one suffix GET, a second one only when the
  footer is longer than 64 KiB);
- on demand, the Bloom filters of the columns asked for (every row group's, as
  ``parquet_bloom_probe`` reads them all) and the page index (every column index and offset
  index: ``parquet_page_index`` parses all of them, a hole fails it), fetched with ranged
  GETs at the offsets DuckDB's ``parquet_metadata`` reads from the mirror's footer.

A mirror is named after the object's path and stamp (size and ETag) in a folder
(``SQUALL_MIRROR_DIR``, default ``<tmp>/squall-parquet-mirrors-<uid>``); a JSON file beside
it lists what it holds. Asking for a path at a new stamp deletes its mirrors of older
stamps. Ranges are written before the JSON names them, so a mirror never claims bytes it
does not hold; a Bloom filter whose length the footer does not give is never mirrored (its
bytes could not be fetched whole).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Collection

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from squall.driver.skipping.page_index import IndexFile, connect
from squall.errors import DataError
from squall.operators.s3storage import footer_span, plan_ranges
from squall.operators.storage import Storage

#: bytes of an object's end read for its footer in one GET
FOOTER_BYTES = 64 * 1024
#: index ranges closer than this are fetched in one GET
COALESCE_BYTES = 64 * 1024


class MirrorStore:
    """Metadata mirrors in one folder (see the module doc); thread-safe."""

    def __init__(self, folder: str | None = None) -> None:
        self.folder = folder or default_folder()
        self._lock = threading.Lock()
        self.built = 0  # mirrors made (a footer fetched)
        self.dropped = 0  # mirrors of an older stamp deleted

    def mirror(
        self,
        storage: Storage,
        path: str,
        stamp: str,
        *,
        bloom_columns: Collection[str] = (),
        page_index: bool = False,
        footer: pq.FileMetaData | None = None,
    ) -> IndexFile | None:
        """The mirror of ``path`` at ``stamp`` holding at least the footer, the Bloom filters of
        ``bloom_columns`` and (with ``page_index``) the page index; None when it cannot be made, or when
        the footer fetched for a new mirror is not ``footer`` (the one the plan uses: the object changed
        since it was listed)."""
        if not stamp:
            return None
        base = hashlib.sha256(path.encode()).hexdigest()[:24]
        tag = hashlib.sha256(stamp.encode()).hexdigest()[:16]
        file = os.path.join(self.folder, f"{base}-{tag}.parquet")
        with self._lock:
            try:
                os.makedirs(self.folder, exist_ok=True)
                self._drop_others(base, file)
                held = _held(file)
                if held is None:
                    _build(storage, path, file)
                    self.built += 1
                    if footer is not None and not pq.read_metadata(file).equals(footer):
                        self._remove(file)
                        return None
                    held = _held(file) or {}
                want = [f"bloom:{c}" for c in sorted(bloom_columns)] + (["page_index"] if page_index else [])
                missing = [p for p in want if p not in held]
                if missing:
                    held = _add(storage, path, file, held, missing)
            except (DataError, OSError, duckdb.Error, ValueError, pa.ArrowException):
                return None
        return IndexFile(
            file,
            frozenset(p.removeprefix("bloom:") for p, ok in held.items() if ok and p.startswith("bloom:")),
            bool(held.get("page_index")),
        )

    def _drop_others(self, base: str, keep: str) -> None:
        """Delete the mirrors of ``base`` at other stamps (the object changed)."""
        for old in glob.glob(os.path.join(self.folder, f"{base}-*.parquet")):
            if old != keep:
                self._remove(old)
                self.dropped += 1

    @staticmethod
    def _remove(file: str) -> None:
        for f in (file, file + ".json"):
            try:
                os.remove(f)
            except FileNotFoundError:
                pass


def default_folder() -> str:
    """``SQUALL_MIRROR_DIR``, else a per-user folder under the temp dir."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.environ.get("SQUALL_MIRROR_DIR") or os.path.join(
        tempfile.gettempdir(), f"squall-parquet-mirrors-{uid}"
    )


_STORES: dict[str, MirrorStore] = {}
_STORES_LOCK = threading.Lock()


def store() -> MirrorStore:
    """The process's mirror store for the current :func:`default_folder`."""
    folder = default_folder()
    with _STORES_LOCK:
        if folder not in _STORES:
            _STORES[folder] = MirrorStore(folder)
        return _STORES[folder]


def _held(file: str) -> dict[str, bool] | None:
    """What a mirror holds: part -> whether it could be mirrored; None when there is no mirror."""
    if not os.path.exists(file):
        return None
    try:
        with open(file + ".json") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    held = doc.get("held") if isinstance(doc, dict) else None
    return {str(k): bool(v) for k, v in held.items()} if isinstance(held, dict) else None


def _write_held(file: str, held: dict[str, bool]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".mirror-", dir=os.path.dirname(file))
    with os.fdopen(fd, "w") as f:
        json.dump({"held": held}, f)
    os.replace(tmp, file + ".json")


def _build(storage: Storage, path: str, file: str) -> None:
    """A new sparse mirror holding ``PAR1`` and the footer of ``path``."""
    size = storage.size(path)
    if size < 12:
        raise DataError(f"not a Parquet file: {path}")
    lo = max(0, size - FOOTER_BYTES)
    (tail,) = storage.read_ranges(path, [(lo, size)])
    need = footer_span(tail, size, path)
    if need > len(tail):
        (head,) = storage.read_ranges(path, [(size - need, lo)])
        tail = head + tail
    fd, tmp = tempfile.mkstemp(prefix=".mirror-", suffix=".parquet", dir=os.path.dirname(file))
    with os.fdopen(fd, "wb") as f:
        f.truncate(size)
        f.write(b"PAR1")
        f.seek(size - need)
        f.write(tail[-need:])
    os.replace(tmp, file)
    _write_held(file, {})


def _add(storage: Storage, path: str, file: str, held: dict[str, bool], parts: list[str]) -> dict[str, bool]:
    """Fetch the ranges of ``parts`` ("page_index", "bloom:<column>") into the mirror."""
    with connect(file) as con:
        rows = con.execute(
            "SELECT path_in_schema, bloom_filter_offset, bloom_filter_length, column_index_offset, "
            "column_index_length, offset_index_offset, offset_index_length FROM parquet_metadata(?)",
            [file],
        ).fetchall()
    ranges: list[tuple[int, int]] = []
    out = dict(held)
    for part in parts:
        mine: list[tuple[int, int]] = []
        ok = True
        if part == "page_index":
            for _col, _bo, _bl, cio, cil, oio, oil in rows:
                if cio is not None and cil:
                    mine.append((cio, cio + cil))
                if oio is not None and oil:
                    mine.append((oio, oio + oil))
            ok = bool(mine)
        else:
            column = part.removeprefix("bloom:")
            chunks = [(bo, bl) for col, bo, bl, *_rest in rows if col == column]
            ok = bool(chunks) and all(bo is not None and bl for bo, bl in chunks)
            if ok:
                mine = [(bo, bo + bl) for bo, bl in chunks]
        if ok:
            ranges += mine
        out[part] = ok
    parts_to_get = plan_ranges(sorted(set(ranges)), COALESCE_BYTES) if ranges else []
    if parts_to_get:
        bodies = storage.read_ranges(path, parts_to_get)
        with open(file, "r+b") as f:
            for (lo, hi), body in zip(parts_to_get, bodies, strict=True):
                if len(body) != hi - lo:
                    raise DataError(f"short read from {path}")
                f.seek(lo)
                f.write(body)
    _write_held(file, out)
    return out
