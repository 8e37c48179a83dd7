"""Storage interface: where table files live and how a scan reads them.

A Storage answers two listing questions, :meth:`Storage.file_entry` (the file at
a path) and :meth:`Storage.list_folder` (the files in a folder, or under it);
what a table *location* means — a file, a folder, a glob in any path component
— is decided once, on top of them, by :mod:`squall.driver.catalog.listing`.
Object stores add their own schemes (``s3://bucket/prefix/``). Implementations
are looked up by URL scheme with :func:`storage_for`. Every method is safe to
call from several threads.
"""

from __future__ import annotations

import os
import stat
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from squall.errors import DataError
from squall.registry import Registry


@dataclass(frozen=True)
class FileEntry:
    """One listed file: its path (as the storage names it), size in bytes, and a text that changes when
    the file does (size and mtime, or size and ETag; "" when unknown)."""

    path: str
    size: int
    stamp: str = ""


class Storage(ABC):
    """Reads Parquet data for scans and the catalog; counts its requests."""

    scheme: ClassVar[str]

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options = dict(options or {})
        self._lock = threading.Lock()
        self._requests: dict[str, int] = {}
        self.bytes_read = 0

    def count(self, kind: str, n: int = 1, nbytes: int = 0) -> None:
        with self._lock:
            self._requests[kind] = self._requests.get(kind, 0) + n
            self.bytes_read += nbytes

    def requests(self) -> dict[str, int]:
        """Requests issued so far by type (``get``, ``list``, ``head``, ``open``, …)."""
        with self._lock:
            return dict(self._requests)

    def stamp(self, path: str) -> str:
        """A text that changes when the file changes (size and mtime, or ETag); "" when unknown."""
        return ""

    def size(self, path: str) -> int:
        """The size of one file in bytes (for ranged reads)."""
        raise DataError(f"{self.scheme} storage cannot read byte ranges: {path}")

    def read_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of ``[start, end)`` ranges of one file, in order (counted as ``get`` requests)."""
        raise DataError(f"{self.scheme} storage cannot read byte ranges: {path}")

    def read_prefix(self, path: str, nbytes: int) -> tuple[bytes, int]:
        """(the first ``nbytes`` of one file, or all of it when shorter; the file's size). Default:
        :meth:`size` and :meth:`read_ranges`; an object store answers both with one ranged GET."""
        size = self.size(path)
        return (self.read_ranges(path, [(0, min(nbytes, size))])[0] if size else b""), size

    @abstractmethod
    def file_entry(self, path: str) -> FileEntry | None:
        """The file at ``path``; None when there is none (nothing there, or a folder)."""

    @abstractmethod
    def list_folder(self, folder: str, *, recursive: bool) -> list[FileEntry] | None:
        """The files in ``folder`` (a path ending with ``/``, or ``""`` for the current folder), at every
        level below it when ``recursive``, else only its own; in no particular order. Paths are
        ``folder`` followed by the path below it. None when there is no such folder."""

    @abstractmethod
    def read_metadata(self, path: str) -> pq.FileMetaData:
        """The footer of one Parquet file."""

    @abstractmethod
    def read_row_groups(
        self,
        path: str,
        row_groups: Sequence[int],
        columns: Sequence[str],
        metadata: pq.FileMetaData | None = None,
    ) -> pa.Table:
        """Read ``columns`` of the given row groups of one file (projection pushdown)."""


class LocalStorage(Storage):
    """Files on this machine (or a shared file system)."""

    scheme = "file"

    def stamp(self, path: str) -> str:
        try:
            st = os.stat(path.removeprefix("file://"))
        except OSError:
            return ""
        return f"{st.st_size}:{st.st_mtime_ns}"

    def size(self, path: str) -> int:
        try:
            return os.path.getsize(path.removeprefix("file://"))
        except OSError as exc:
            raise DataError(f"cannot read {path}: {exc.strerror}") from None

    def read_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        out = []
        try:
            with open(path.removeprefix("file://"), "rb") as f:
                for lo, hi in ranges:
                    f.seek(lo)
                    out.append(f.read(hi - lo))
        except OSError as exc:
            raise DataError(f"cannot read {path}: {exc.strerror}") from None
        self.count("get", len(ranges), sum(len(b) for b in out))
        return out

    def file_entry(self, path: str) -> FileEntry | None:
        """The file at ``path`` (one ``list`` request when there is one)."""
        local = path.removeprefix("file://")
        try:
            st = os.stat(local)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        self.count("list")
        return FileEntry(local, st.st_size, f"{st.st_size}:{st.st_mtime_ns}")

    def list_folder(self, folder: str, *, recursive: bool) -> list[FileEntry] | None:
        """One ``list`` request per listed folder (a walk of the tree below it when ``recursive``)."""
        prefix = folder.removeprefix("file://")
        top = prefix or "."
        if not os.path.isdir(top):
            return None
        self.count("list")
        out: list[FileEntry | None] = []
        if recursive:
            for root, _dirs, names in os.walk(top):
                below = os.path.relpath(root, top)
                rel = "" if below == "." else below.replace(os.sep, "/") + "/"
                out.extend(_entry(os.path.join(root, n), prefix + rel + n) for n in names)
        else:
            out = [_entry(os.path.join(top, n), prefix + n) for n in os.listdir(top)]
        return [e for e in out if e is not None]

    def read_metadata(self, path: str) -> pq.FileMetaData:
        self.count("head")
        try:
            return pq.read_metadata(path)
        except (OSError, pa.ArrowInvalid) as exc:
            raise DataError(f"cannot read Parquet footer of {path}: {exc}") from None

    def read_row_groups(
        self,
        path: str,
        row_groups: Sequence[int],
        columns: Sequence[str],
        metadata: pq.FileMetaData | None = None,
    ) -> pa.Table:
        self.count("get", len(row_groups))
        try:
            pf = pq.ParquetFile(path, metadata=metadata, memory_map=True)
            table = pf.read_row_groups(list(row_groups), columns=list(columns), use_threads=True)
        except (OSError, pa.ArrowInvalid) as exc:
            raise DataError(f"cannot read {path}: {exc}") from None
        md = metadata or pf.metadata
        names = set(columns)
        with self._lock:
            for rg in row_groups:
                group = md.row_group(rg)
                for i in range(group.num_columns):
                    col = group.column(i)
                    if col.path_in_schema in names:
                        self.bytes_read += col.total_compressed_size
        return table


def _entry(real: str, path: str) -> FileEntry | None:
    """The entry of a regular file (following links); None for anything else or a file gone meanwhile."""
    try:
        st = os.stat(real)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return FileEntry(path, st.st_size, f"{st.st_size}:{st.st_mtime_ns}")


# scheme -> "module:Class"; imported lazily (S3 needs boto3/pyarrow.fs only when used)
_STORAGES: Registry[type[Storage]] = Registry(
    "storage scheme",
    {"file": "squall.operators.storage:LocalStorage", "s3": "squall.operators.s3storage:S3Storage"},
    DataError,
)


def register_storage(scheme: str, target: str) -> None:
    _STORAGES.register(scheme, target)


def scheme_of(location: str) -> str:
    if "://" in location:
        return location.split("://", 1)[0].lower()
    return "file"


def storage_for(location: str, options: Mapping[str, Any] | None = None) -> Storage:
    """A Storage for a location's scheme (``file`` when it has none)."""
    scheme = scheme_of(location)
    if scheme not in _STORAGES:
        raise DataError(f"unsupported storage scheme {scheme!r} in {location}")
    return _STORAGES.get(scheme)(options)
