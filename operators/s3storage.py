"""Parquet on S3 read with ranged GETs (Lambada-style tuned scans), scheme ``s3``.

- :meth:`S3Storage.file_entry`: one object, one HEAD; :meth:`S3Storage.list_folder`:
  the objects under a prefix (``s3://b/lineitem/``), one LIST per page of 1,000 keys,
  with delimiter ``/`` when only the prefix's own objects are asked for. What a table
  location means (prefix, object, glob) is :mod:`squall.driver.catalog.listing`.
- :meth:`S3Storage.read_metadata`: one suffix GET of the last 64 KiB, which holds
  the footer of most files; a second GET only when the footer is longer.
- :meth:`S3Storage.read_row_groups`: the byte ranges of just the needed column
  chunks of just those row groups (projection pushdown), ranges closer than
  ``coalesce_bytes`` (1 MiB) merged, ranges over ``max_part_bytes`` (16 MiB) cut
  into equal parts of 8-16 MiB, all fetched with parallel ranged GETs; pyarrow
  then decodes from a :class:`RangeFile` that serves reads from the fetched
  bytes (a read outside them costs one more ranged GET, counted). Without a
  footer from the caller, the footer is read once per object and kept for the
  storage's lifetime (a worker's storage lives for one query); listing a
  location again forgets the footers of the listed objects.

Requests are counted by type with the bytes they returned (``get``, ``head``,
``list``). Missing buckets and keys, access denied and unreachable endpoints
raise one-line :class:`squall.errors.DataError` messages. Options (all
optional): ``endpoint_url``, ``region``, ``threads`` (16),
``max_pool_connections`` (32), ``footer_bytes``, ``coalesce_bytes``,
``max_part_bytes``, ``max_retries``, ``retry_mode``; endpoint and credentials
otherwise come from the standard AWS settings.
"""

from __future__ import annotations

import bisect
import math
import struct
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from squall import aws
from squall.aws import denied_error, describe_error, error_code
from squall.errors import DataError
from squall.operators.storage import FileEntry, Storage

MiB = 1024 * 1024


def parse_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> (bucket, key); DataError when it is not an S3 URL."""
    try:
        return aws.parse_s3_url(url)
    except DataError:
        raise DataError(f"not an S3 location (s3://bucket/key): {url}") from None


def column_chunk_ranges(
    metadata: pq.FileMetaData, row_groups: Sequence[int], columns: Sequence[str]
) -> list[tuple[int, int]]:
    """``[start, end)`` byte ranges of the column chunks of ``columns`` in ``row_groups``."""
    names = list(columns)
    known = {metadata.schema.column(i).path.split(".")[0] for i in range(metadata.num_columns)}
    known |= set(metadata.schema.names)
    unknown = [c for c in names if c not in known]
    if unknown:
        raise DataError(f"column(s) not in the file: {', '.join(unknown)}")
    ranges = []
    for rg in row_groups:
        if not 0 <= rg < metadata.num_row_groups:
            raise DataError(f"row group {rg} out of range (file has {metadata.num_row_groups})")
        group = metadata.row_group(rg)
        for i in range(group.num_columns):
            chunk = group.column(i)
            path = chunk.path_in_schema
            if not any(path == c or path.startswith(c + ".") for c in names):
                continue
            start = chunk.data_page_offset
            dictionary = chunk.dictionary_page_offset
            if chunk.has_dictionary_page and dictionary is not None and 0 < dictionary < start:
                start = dictionary
            ranges.append((start, start + chunk.total_compressed_size))
    return ranges


def plan_ranges(
    ranges: Sequence[tuple[int, int]], coalesce_bytes: int = MiB, max_part_bytes: int = 16 * MiB
) -> list[tuple[int, int]]:
    """Merge ranges at most ``coalesce_bytes`` apart, then split ones over ``max_part_bytes``.

    A split range becomes ``n = ⌈len / max_part_bytes⌉`` equal parts, so parts are
    between half and all of ``max_part_bytes`` (8-16 MiB by default).
    """
    merged: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo - merged[-1][1] <= coalesce_bytes:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    out: list[tuple[int, int]] = []
    for lo, hi in merged:
        n = max(1, math.ceil((hi - lo) / max_part_bytes))
        step = math.ceil((hi - lo) / n)
        out.extend((a, min(a + step, hi)) for a in range(lo, hi, step))
    return out


def footer_span(tail: bytes, size: int, path: str) -> int:
    """Bytes at the end of Parquet object ``path`` (of ``size`` bytes) that hold its footer, its length
    and the closing ``PAR1``, from ``tail`` (the object's last bytes, at least 12); DataError when the
    tail does not end a Parquet file."""
    if len(tail) < 12 or tail[-4:] != b"PAR1":
        raise DataError(f"not a Parquet file: {path}")
    (footer_len,) = struct.unpack_from("<I", tail, len(tail) - 8)
    need = footer_len + 8
    if need + 4 > size:
        raise DataError(f"corrupt Parquet footer in {path}")
    return need


class RangeFile:
    """A read-only file over some fetched byte ranges of an object, for ``pa.PythonFile``.

    A read inside one fetched range is a zero-copy slice; one spanning adjacent
    ranges is joined; bytes in no fetched range are fetched with ``fetch(lo, hi)``
    (a counted ranged GET, gap by gap) and kept.
    """

    def __init__(
        self, size: int, ranges: Mapping[int, pa.Buffer], fetch: Callable[[int, int], bytes]
    ) -> None:
        self._size = size
        self._starts = sorted(ranges)
        self._bufs = [ranges[s] for s in self._starts]
        self._fetch = fetch
        self._pos = 0
        self.closed = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = base + pos
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read_buffer(self, nbytes: int = -1) -> pa.Buffer:
        lo = self._pos
        hi = self._size if nbytes is None or nbytes < 0 else min(self._size, lo + nbytes)
        self._pos = max(lo, hi)
        pieces: list[pa.Buffer] = []
        pos = lo
        while pos < hi:
            i = bisect.bisect_right(self._starts, pos) - 1
            if i >= 0 and pos < self._starts[i] + self._bufs[i].size:  # inside fetched range i
                end = min(hi, self._starts[i] + self._bufs[i].size)
                pieces.append(self._bufs[i].slice(pos - self._starts[i], end - pos))
            else:  # a gap: fetch up to the next fetched range
                end = min(hi, self._starts[i + 1]) if i + 1 < len(self._starts) else hi
                data = pa.py_buffer(self._fetch(pos, end))
                self._starts.insert(i + 1, pos)
                self._bufs.insert(i + 1, data)
                pieces.append(data)
            pos = end
        if len(pieces) == 1:
            return pieces[0]
        return pa.py_buffer(b"".join(p.to_pybytes() for p in pieces))

    def read(self, nbytes: int = -1) -> bytes:
        return self.read_buffer(nbytes).to_pybytes()

    def close(self) -> None:
        self.closed = True


class S3Storage(Storage):
    """Parquet objects on S3 (see module doc)."""

    scheme = "s3"

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.footer_bytes = int(self.options.get("footer_bytes", 64 * 1024))
        self.coalesce_bytes = int(self.options.get("coalesce_bytes", MiB))
        self.max_part_bytes = int(self.options.get("max_part_bytes", 16 * MiB))
        self._sizes: dict[str, int] = {}
        self._etags: dict[str, str] = {}  # s3:// URL -> ETag from the last listing (or HEAD)
        self._footers: dict[str, pq.FileMetaData] = {}
        self._client_obj: Any = None
        self._pool_obj: ThreadPoolExecutor | None = None
        self._init_lock = threading.Lock()

    # -- plumbing

    @property
    def client(self) -> Any:
        with self._init_lock:
            if self._client_obj is None:
                self._client_obj = aws.s3_client(self.options)
            return self._client_obj

    @property
    def _pool(self) -> ThreadPoolExecutor:
        with self._init_lock:
            if self._pool_obj is None:
                self._pool_obj = ThreadPoolExecutor(
                    int(self.options.get("threads", 16)), thread_name_prefix="s3scan"
                )
            return self._pool_obj

    def close(self) -> None:
        """Stop the fetch threads (the storage stays usable: they restart on demand)."""
        with self._init_lock:
            pool, self._pool_obj = self._pool_obj, None
        if pool is not None:
            pool.shutdown(wait=True)

    def _call(self, kind: str, bucket: str, key: str, call: Callable[..., Any], **kwargs: Any) -> Any:
        """One S3 request, counted; failures become a one-line DataError."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return call(Bucket=bucket, Key=key, **kwargs)
        except (ClientError, BotoCoreError) as exc:
            self.count(kind)
            raise denied_error(exc, bucket, key) or DataError(describe_error(exc, bucket, key)) from None

    def _get(self, path: str, byte_range: str) -> tuple[bytes, int]:
        """One ranged GET: (bytes, object size)."""
        bucket, key = parse_s3_url(path)
        resp = self._call("get", bucket, key, self.client.get_object, Range=byte_range)
        body = resp["Body"].read()
        self.count("get", 1, len(body))
        total = int(str(resp.get("ContentRange", "")).rpartition("/")[2] or len(body))
        with self._lock:
            self._sizes[path] = total
        return body, total

    def _get_range(self, path: str, lo: int, hi: int) -> bytes:
        body, _total = self._get(path, f"bytes={lo}-{hi - 1}")
        if len(body) != hi - lo:
            raise DataError(f"short read from {path}: {len(body)} of {hi - lo} bytes")
        return body

    def _size(self, path: str) -> int:
        with self._lock:
            size = self._sizes.get(path)
        if size is None:
            bucket, key = parse_s3_url(path)
            size = int(self._call("head", bucket, key, self.client.head_object)["ContentLength"])
            self.count("head")
            with self._lock:
                self._sizes[path] = size
        return size

    # -- Storage

    def size(self, path: str) -> int:
        """The object's size (from its listing, else one HEAD)."""
        return self._size(path)

    def read_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """One ranged GET per range, in parallel."""
        return list(self._pool.map(lambda r: self._get_range(path, *r), ranges))

    def read_prefix(self, path: str, nbytes: int) -> tuple[bytes, int]:
        """The object's first ``nbytes`` and its size in one ranged GET (no HEAD; S3 refuses any range of an
        empty object: then one HEAD more)."""
        try:
            return self._get(path, f"bytes=0-{max(nbytes, 1) - 1}")
        except DataError:
            if self._size(path) != 0:
                raise
            return b"", 0

    def stamp(self, path: str) -> str:
        """Size and ETag from the table's listing (a re-listed, rewritten object gets a new stamp)."""
        with self._lock:
            etag, size = self._etags.get(path), self._sizes.get(path)
        return f"{size}:{etag}" if etag else ""

    def file_entry(self, path: str) -> FileEntry | None:
        """The object at ``path``: one HEAD (none for a key ending with ``/``, which names a prefix)."""
        bucket, key = parse_s3_url(path)
        if key == "" or key.endswith("/"):
            return None
        found = self._single(bucket, key)
        if not found:
            return None
        self._listed({path: found[key]})
        return FileEntry(path, found[key], self.stamp(path))

    def list_folder(self, folder: str, *, recursive: bool) -> list[FileEntry] | None:
        """The objects under prefix ``folder``: one LIST per page of 1,000 keys (with delimiter ``/``
        unless ``recursive``); None when there are none. Listing forgets the footers kept of them."""
        bucket, prefix = parse_s3_url(folder)
        objects = self._list(bucket, prefix, delimiter="" if recursive else "/")
        urls = {f"s3://{bucket}/{k}": size for k, size in objects.items() if not k.endswith("/")}
        if not urls:
            return None
        self._listed(urls)
        return [FileEntry(url, size, self.stamp(url)) for url, size in urls.items()]

    def _listed(self, sizes: Mapping[str, int]) -> None:
        """Keep the sizes of listed objects; forget their footers (a re-listed object may be new)."""
        with self._lock:
            self._sizes.update(sizes)
            for url in sizes:
                self._footers.pop(url, None)

    def _list(self, bucket: str, prefix: str, delimiter: str = "") -> dict[str, int]:
        """Key -> size of the objects under ``prefix`` (one LIST per page of 1,000)."""
        from botocore.exceptions import BotoCoreError, ClientError

        kwargs = {"Bucket": bucket, "Prefix": prefix, **({"Delimiter": delimiter} if delimiter else {})}
        out: dict[str, int] = {}
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(**kwargs):
                self.count("list")
                contents = page.get("Contents", [])
                out.update((obj["Key"], int(obj["Size"])) for obj in contents)
                with self._lock:
                    self._etags.update(
                        (f"s3://{bucket}/{o['Key']}", str(o.get("ETag", ""))) for o in contents
                    )
        except (ClientError, BotoCoreError) as exc:
            self.count("list")
            raise denied_error(exc, bucket, prefix) or DataError(
                describe_error(exc, bucket, prefix)
            ) from None
        return out

    def _single(self, bucket: str, key: str) -> dict[str, int]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            resp = self.client.head_object(Bucket=bucket, Key=key)
        except (ClientError, BotoCoreError) as exc:
            self.count("head")
            if error_code(exc) in ("404", "NoSuchKey"):
                return {}
            if error_code(exc) == "NoSuchBucket":
                raise DataError(f"S3 bucket {bucket!r} does not exist") from None
            raise denied_error(exc, bucket, key) or DataError(describe_error(exc, bucket, key)) from None
        self.count("head")
        with self._lock:
            self._etags[f"s3://{bucket}/{key}"] = str(resp.get("ETag", ""))
        return {key: int(resp["ContentLength"])}

    def read_metadata(self, path: str) -> pq.FileMetaData:
        with self._lock:
            if self._sizes.get(path) == 0:
                raise DataError(f"not a Parquet file (empty object): {path}")
        tail, total = self._get(path, f"bytes=-{self.footer_bytes}")
        need = footer_span(tail, total, path)
        if need > len(tail):
            tail = self._get_range(path, total - need, total - len(tail)) + tail
        try:
            return pq.read_metadata(pa.BufferReader(b"PAR1" + tail[-need:]))
        except (OSError, pa.ArrowInvalid) as exc:
            raise DataError(f"cannot read Parquet footer of {path}: {exc}".splitlines()[0]) from None

    def read_row_groups(
        self,
        path: str,
        row_groups: Sequence[int],
        columns: Sequence[str],
        metadata: pq.FileMetaData | None = None,
    ) -> pa.Table:
        if metadata is None:
            with self._lock:
                metadata = self._footers.get(path)
            if metadata is None:
                metadata = self.read_metadata(path)
                with self._lock:
                    self._footers[path] = metadata
        parts = plan_ranges(
            column_chunk_ranges(metadata, row_groups, columns), self.coalesce_bytes, self.max_part_bytes
        )
        bodies = list(self._pool.map(lambda r: self._get_range(path, *r), parts))
        fetched = {lo: pa.py_buffer(body) for (lo, _hi), body in zip(parts, bodies, strict=True)}
        source = RangeFile(self._size(path), fetched, lambda lo, hi: self._get_range(path, lo, hi))
        try:
            # pre_buffer would coalesce reads across the gaps we skipped (costing GETs); all is in memory
            pf = pq.ParquetFile(pa.PythonFile(source, mode="r"), metadata=metadata, pre_buffer=False)
            return pf.read_row_groups(list(row_groups), columns=list(columns), use_threads=True)
        except (OSError, pa.ArrowInvalid) as exc:
            raise DataError(f"cannot read {path}: {exc}".splitlines()[0]) from None
