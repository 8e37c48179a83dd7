"""Sinks: where written files go (the write side of :mod:`squall.operators.storage`).

A write runs in two places. Workers put their part files into a per-query staging folder
(:meth:`Sink.put`); the driver commits them to the target (:meth:`Sink.move`), writes the final listing,
and removes what is left of the staging folder (:meth:`Sink.delete_under`). Local folders move files by
rename (atomic, same file system); S3 copies them server-side (multipart for large objects) and deletes the
staged keys. Implementations are looked up by URL scheme with :func:`sink_for`; every method is safe to call
from several threads.
"""

from __future__ import annotations

import os
import shutil
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

from squall import aws
from squall.errors import DataError
from squall.registry import Registry

MiB = 1024 * 1024


class Sink(ABC):
    """Puts, moves, lists and deletes files under one URL scheme; counts its requests."""

    scheme: ClassVar[str]

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options = dict(options or {})
        self._lock = threading.Lock()
        self._requests: dict[str, int] = {}

    def count(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self._requests[kind] = self._requests.get(kind, 0) + n

    def requests(self) -> dict[str, int]:
        """Requests issued so far by type (``put``, ``copy``, ``delete``, ``list``, …)."""
        with self._lock:
            return dict(self._requests)

    @abstractmethod
    def put(self, local_path: str, dest: str) -> None:
        """Upload the local file ``local_path`` as ``dest`` (multipart when large)."""

    @abstractmethod
    def put_bytes(self, dest: str, data: bytes) -> None:
        """Write ``data`` as the file ``dest``."""

    @abstractmethod
    def move(self, src: str, dest: str) -> None:
        """Make the file ``src`` visible as ``dest`` (replacing it) and remove ``src``."""

    @abstractmethod
    def list_under(self, prefix: str) -> list[str]:
        """Every file under the folder ``prefix`` (its full paths)."""

    @abstractmethod
    def delete(self, paths: Iterable[str]) -> None:
        """Delete these files (missing ones are fine)."""

    def delete_under(self, prefix: str) -> int:
        """Delete every file under the folder ``prefix``; returns how many there were."""
        found = self.list_under(prefix)
        self.delete(found)
        return len(found)

    def exists(self, path: str) -> bool:
        """Whether ``path`` is a file or a folder holding at least one file."""
        return bool(self.list_under(path.rstrip("/") + "/")) or self.is_file(path)

    @abstractmethod
    def is_file(self, path: str) -> bool:
        """Whether the file ``path`` exists."""


def _local(path: str) -> str:
    return path.removeprefix("file://")


class LocalSink(Sink):
    """Files on this machine's file system."""

    scheme = "file"

    def put(self, local_path: str, dest: str) -> None:
        dest = _local(dest)
        if os.path.abspath(local_path) != os.path.abspath(dest):
            os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
            shutil.move(local_path, dest)
        self.count("put")

    def put_bytes(self, dest: str, data: bytes) -> None:
        dest = _local(dest)
        os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
        tmp = f"{dest}.tmp-{os.getpid()}-{threading.get_ident()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, dest)
        self.count("put")

    def move(self, src: str, dest: str) -> None:
        dest = _local(dest)
        os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
        os.replace(_local(src), dest)
        self.count("rename")

    def list_under(self, prefix: str) -> list[str]:
        root = _local(prefix)
        found: list[str] = []
        for folder, _dirs, names in os.walk(root):
            found.extend(os.path.join(folder, n) for n in names)
        self.count("list")
        return sorted(found)

    def delete(self, paths: Iterable[str]) -> None:
        for p in paths:
            try:
                os.remove(_local(p))
                self.count("delete")
            except FileNotFoundError:
                pass

    def delete_under(self, prefix: str) -> int:
        n = len(self.list_under(prefix))
        shutil.rmtree(_local(prefix), ignore_errors=True)
        return n

    def is_file(self, path: str) -> bool:
        return os.path.isfile(_local(path))


class S3Sink(Sink):
    """Objects on S3 (or an S3 API such as moto's server): multipart uploads, server-side copies."""

    scheme = "s3"

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self._client_obj: Any = None
        self._init_lock = threading.Lock()

    @property
    def client(self) -> Any:
        with self._init_lock:
            if self._client_obj is None:
                self._client_obj = aws.s3_client(self.options)
            return self._client_obj

    def _transfer(self) -> Any:
        from boto3.s3.transfer import TransferConfig

        part = int(self.options.get("part_bytes", 16 * MiB))
        return TransferConfig(multipart_threshold=part, multipart_chunksize=part, max_concurrency=8)

    def _call(self, what: str, path: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return call(*args, **kwargs)
        except (ClientError, BotoCoreError, S3UploadFailedError) as exc:
            if isinstance(exc, S3UploadFailedError) and isinstance(exc.__context__, ClientError):
                exc = exc.__context__  # boto3's upload_file wraps the request's error in its own
            bucket, key = aws.parse_s3_url(path)
            denied = aws.denied_error(exc, bucket, key)
            raise denied or DataError(
                f"cannot {what} {path}: {aws.describe_error(exc, bucket, key)}"
            ) from None

    def put(self, local_path: str, dest: str) -> None:
        bucket, key = aws.parse_s3_url(dest)
        size = os.path.getsize(local_path)
        self._call("write", dest, self.client.upload_file, local_path, bucket, key, Config=self._transfer())
        part = int(self.options.get("part_bytes", 16 * MiB))
        self.count("put", max(1, -(-size // part)) + (2 if size >= part else 0))

    def put_bytes(self, dest: str, data: bytes) -> None:
        bucket, key = aws.parse_s3_url(dest)
        self._call("write", dest, self.client.put_object, Bucket=bucket, Key=key, Body=data)
        self.count("put")

    def move(self, src: str, dest: str) -> None:
        sb, sk = aws.parse_s3_url(src)
        db, dk = aws.parse_s3_url(dest)
        source = {"Bucket": sb, "Key": sk}
        self._call("write", dest, self.client.copy, source, db, dk, Config=self._transfer())
        self.count("copy")
        self.delete([src])

    def list_under(self, prefix: str) -> list[str]:
        bucket, key = aws.parse_s3_url(prefix.rstrip("/") + "/")
        found: list[str] = []
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key)
        try:
            for page in pages:
                self.count("list")
                found.extend(f"s3://{bucket}/{o['Key']}" for o in page.get("Contents", ()))
        except Exception as exc:  # botocore errors, raised while paging
            from botocore.exceptions import BotoCoreError, ClientError

            if isinstance(exc, (ClientError, BotoCoreError)):
                denied = aws.denied_error(exc, bucket, key)
                raise denied or DataError(
                    f"cannot list {prefix}: {aws.describe_error(exc, bucket, key)}"
                ) from None
            raise
        return sorted(found)

    def delete(self, paths: Iterable[str]) -> None:
        by_bucket: dict[str, list[str]] = {}
        for p in paths:
            bucket, key = aws.parse_s3_url(p)
            by_bucket.setdefault(bucket, []).append(key)
        for bucket, keys in by_bucket.items():
            for i in range(0, len(keys), 1000):
                batch = [{"Key": k} for k in keys[i : i + 1000]]
                self._call(
                    "delete", f"s3://{bucket}/", self.client.delete_objects,
                    Bucket=bucket, Delete={"Objects": batch, "Quiet": True},
                )  # fmt: skip
                self.count("delete")

    def is_file(self, path: str) -> bool:
        from botocore.exceptions import ClientError

        bucket, key = aws.parse_s3_url(path)
        if not key:
            return False
        try:
            self.client.head_object(Bucket=bucket, Key=key)
            return True
        except ClientError:
            return False
        finally:
            self.count("head")


def move_all(sink: Sink, moves: Iterable[tuple[str, str]], threads: int = 16) -> None:
    """``sink.move`` every (src, dest) pair, ``threads`` at a time (S3 copies are round trips)."""
    pairs = list(moves)
    if len(pairs) <= 1 or sink.scheme == "file":
        for src, dest in pairs:
            sink.move(src, dest)
        return
    with ThreadPoolExecutor(min(threads, len(pairs)), thread_name_prefix="squall-commit") as pool:
        list(pool.map(lambda pair: sink.move(*pair), pairs))


_SINKS: Registry[type[Sink]] = Registry(
    "write scheme",
    {"file": "squall.operators.sinks:LocalSink", "s3": "squall.operators.sinks:S3Sink"},
    DataError,
)


def sink_for(location: str, options: Mapping[str, Any] | None = None) -> Sink:
    """A Sink for a location's scheme (``file`` when it has none)."""
    scheme = location.split("://", 1)[0].lower() if "://" in location else "file"
    if scheme not in _SINKS:
        raise DataError(f"cannot write to {scheme}:// locations ({location})")
    return _SINKS.get(scheme)(options)
