"""Storage interface: where table files live and how a scan reads them.

A table location is a Parquet file, a folder of Parquet files, or a glob
(``data/lineitem/*.parquet``); object stores add their own schemes
(``s3://bucket/prefix/``). Implementations are looked up by URL scheme with
:func:`storage_for`. Every method is safe to call from several threads.
"""

from __future__ import annotations

import glob
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from squall.errors import DataError
from squall.registry import Registry


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

    @abstractmethod
    def list_files(self, location: str) -> list[str]:
        """The Parquet files of a table location, sorted; DataError when there are none."""

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

    def list_files(self, location: str) -> list[str]:
        path = location.removeprefix("file://")
        if any(ch in path for ch in "*?["):
            files = sorted(p for p in glob.glob(path, recursive=True) if os.path.isfile(p))
        elif os.path.isdir(path):
            files = sorted(
                os.path.join(root, name)
                for root, _dirs, names in os.walk(path)
                for name in names
                if name.endswith(".parquet") and not name.startswith((".", "_"))
            )
        elif os.path.isfile(path):
            files = [path]
        else:
            raise DataError(f"table location not found: {location}")
        self.count("list")
        if not files:
            raise DataError(f"no Parquet files at {location}")
        return files

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
