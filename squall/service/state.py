"""State stores: where the service keeps queries (request, status, cancel marker, results) by key.

A store is a flat key → bytes map under one root URL, found by scheme with :func:`state_store`:

- ``s3://bucket/prefix`` — :class:`S3StateStore` (the deployed service; ``SQUALL_BUCKET``);
- a folder path (or ``file://…``) — :class:`LocalStateStore` (``squall serve`` without S3).

Both offer the same operations, and both make ``put(create_only=True)`` atomic: S3 with a conditional
``PutObject`` (``If-None-Match: *``), the folder with ``os.link`` of a fully written temporary file (fails
with ``EEXIST`` like ``O_EXCL``, but a reader never sees a half-written file). The service uses that for
Idempotency-Key objects and to submit a query exactly once.

Large results leave through :meth:`StateStore.link`: a presigned GET URL on S3; a local folder has no URLs,
so its link is the file path and ``squall serve`` streams the file through the HTTP server itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from squall import aws
from squall.errors import DataError, OptionError
from squall.registry import Registry

_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)*$")


@dataclass(frozen=True)
class Link:
    """Where a client can fetch an object without going through the API: a URL, or a local file path."""

    url: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class Entry:
    """An object directly under a prefix: its ``name``, when it was last written (``modified``, seconds since the
    epoch) and its ``tag`` (S3: the ETag), which :meth:`StateStore.delete_if` compares."""

    name: str
    modified: float
    tag: str


def check_key(key: str) -> str:
    """``key`` if it is a safe relative key (no ``..``, no leading ``/`` or ``.``), else OptionError."""
    if not _KEY.match(key) or ".." in key.split("/"):
        raise OptionError(f"invalid state key {key!r}")
    return key


class StateStore(ABC):
    """A key → bytes map under :attr:`url`. Every method is safe to call from several threads."""

    scheme: ClassVar[str]
    #: True when :meth:`link` returns URLs that clients can fetch directly (presigned).
    presigns: ClassVar[bool] = False

    url: str

    @abstractmethod
    def put(
        self, key: str, data: bytes, *, create_only: bool = False, content_type: str | None = None
    ) -> bool:
        """Write ``data`` at ``key``. With ``create_only`` write only if ``key`` does not exist yet (atomic)
        and return False if it did; otherwise always True."""

    @abstractmethod
    def get(self, key: str) -> bytes | None:
        """The object at ``key``, or None if there is none."""

    @abstractmethod
    def size(self, key: str) -> int | None:
        """Size in bytes of the object at ``key``, or None if there is none."""

    @abstractmethod
    def link(self, key: str, *, expires_s: int, content_type: str, filename: str) -> Link:
        """A way to fetch ``key`` without the API (presigned URL, or a local path)."""

    @abstractmethod
    def children(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> list[str]:
        """Names one level below ``prefix`` (``""``: the root), files and folders alike, in ascending order:
        only those after ``start_after``, at most ``limit``."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object at ``key`` and every object under ``key/`` (nothing to remove is no error)."""

    @abstractmethod
    def entries(self, prefix: str) -> list[Entry]:
        """The objects directly under ``prefix`` (not the folders), in ascending order of name."""

    @abstractmethod
    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        """The object at ``key`` and its tag (see :class:`Entry`), or None if there is none."""

    @abstractmethod
    def delete_if(self, key: str, tag: str) -> bool:
        """Remove the single object at ``key`` only if its tag is still ``tag`` (S3: a conditional
        ``DeleteObject`` with ``If-Match``); False if it changed or is gone."""

    def put_json(self, key: str, value: Any, *, create_only: bool = False) -> bool:
        """Write ``value`` as JSON (see :meth:`put`)."""
        data = json.dumps(value, separators=(",", ":"), default=str).encode()
        return self.put(key, data, create_only=create_only, content_type="application/json")

    def get_json(self, key: str) -> Any:
        """The JSON value at ``key``, or None if there is none."""
        data = self.get(key)
        return None if data is None else json.loads(data)

    def exists(self, key: str) -> bool:
        return self.size(key) is not None

    def close(self) -> None:  # noqa: B027 - optional
        """Release clients and connections."""


class LocalStateStore(StateStore):
    """A folder on this machine; keys are relative paths under it."""

    scheme = "file"

    def __init__(self, url: str, **_options: Any) -> None:
        self.root = Path(url.removeprefix("file://")).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.url = str(self.root)

    def path(self, key: str) -> Path:
        """The file that holds ``key``."""
        return self.root / check_key(key)

    def put(
        self, key: str, data: bytes, *, create_only: bool = False, content_type: str | None = None
    ) -> bool:
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
        try:
            if create_only:
                try:
                    os.link(tmp, target)
                except FileExistsError:
                    return False
            else:
                os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def get(self, key: str) -> bytes | None:
        try:
            return self.path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def size(self, key: str) -> int | None:
        try:
            return self.path(key).stat().st_size
        except (FileNotFoundError, NotADirectoryError):
            return None

    def link(self, key: str, *, expires_s: int, content_type: str, filename: str) -> Link:
        return Link(path=str(self.path(key)))

    def children(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> list[str]:
        folder = self.path(prefix) if prefix else self.root
        try:
            names = sorted(n for n in os.listdir(folder) if _KEY.match(n))
        except (FileNotFoundError, NotADirectoryError):
            return []
        if start_after is not None:
            names = [n for n in names if n > start_after]
        return names[:limit] if limit is not None else names

    def delete(self, key: str) -> None:
        target = self.path(key)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)

    def entries(self, prefix: str) -> list[Entry]:
        out = []
        for name in self.children(prefix):
            path = self.path(f"{prefix}/{name}")
            try:
                if path.is_file():
                    out.append(Entry(name, path.stat().st_mtime, _tag(path.read_bytes())))
            except FileNotFoundError:  # removed in between
                continue
        return out

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        data = self.get(key)
        return None if data is None else (data, _tag(data))

    def delete_if(self, key: str, tag: str) -> bool:
        with _LOCAL_DELETE:  # atomic within this process, which is all a local folder serves
            found = self.get_tagged(key)
            if found is None or found[1] != tag:
                return False
            self.path(key).unlink(missing_ok=True)
            return True


_LOCAL_DELETE = threading.Lock()


def _tag(data: bytes) -> str:
    """A local object's tag: the MD5 of its bytes, as S3's ETag of a single-part upload."""
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


class S3StateStore(StateStore):
    """Objects under ``s3://bucket/prefix/``. Options: ``endpoint_url``, ``region``, ``client`` (a boto3 S3
    client to use). The endpoint defaults to boto3's own configuration (``AWS_ENDPOINT_URL`` included)."""

    scheme = "s3"
    presigns = True

    def __init__(
        self,
        url: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        client: Any = None,
        **_options: Any,
    ) -> None:
        try:  # the scheme's case does not matter (state_store picked this class by it)
            bucket, prefix = aws.parse_s3_url("s3://" + url.split("://", 1)[1])
        except DataError:
            raise OptionError(f"state store URL needs a bucket: {url}") from None
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.url = f"s3://{bucket}/{self.prefix}"
        self._endpoint_url = endpoint_url
        self._region = region
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = aws.client(
                "s3",
                endpoint_url=self._endpoint_url,
                region=self._region,
                max_pool_connections=16,
                max_retries=5,
            )
        return self._client

    def _key(self, key: str) -> str:
        return self.prefix + check_key(key)

    def put(
        self, key: str, data: bytes, *, create_only: bool = False, content_type: str | None = None
    ) -> bool:
        from botocore.exceptions import ClientError

        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": self._key(key), "Body": data}
        if content_type:
            kwargs["ContentType"] = content_type
        if create_only:
            kwargs["IfNoneMatch"] = "*"
        try:
            self.client.put_object(**kwargs)
        except ClientError as err:
            code = err.response.get("Error", {}).get("Code", "")
            status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if create_only and (
                code in ("PreconditionFailed", "ConditionalRequestConflict") or status == 412
            ):
                return False
            raise
        return True

    @staticmethod
    def _missing(err: Exception) -> bool:
        response = getattr(err, "response", {}) or {}
        code = response.get("Error", {}).get("Code", "")
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return code in ("NoSuchKey", "404", "NotFound") or status == 404

    def get(self, key: str) -> bytes | None:
        tagged = self.get_tagged(key)
        return None if tagged is None else tagged[0]

    def size(self, key: str) -> int | None:
        from botocore.exceptions import ClientError

        try:
            response = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as err:
            if self._missing(err):
                return None
            raise
        return int(response["ContentLength"])

    def link(self, key: str, *, expires_s: int, content_type: str, filename: str) -> Link:
        url = self.client.generate_presigned_url(
            "get_object",
            Params={
                "Bucket": self.bucket,
                "Key": self._key(key),
                "ResponseContentType": content_type,
                "ResponseContentDisposition": f'attachment; filename="{filename}"',
            },
            ExpiresIn=expires_s,
        )
        return Link(url=url)

    def children(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> list[str]:
        base = self._key(prefix) + "/" if prefix else self.prefix
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": base, "Delimiter": "/"}
        if start_after is not None:
            kwargs["StartAfter"] = base + start_after  # keys under start_after/ still come: filtered below
        names: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(**kwargs):
            found = [p["Prefix"][len(base) :].rstrip("/") for p in page.get("CommonPrefixes", [])]
            found += [o["Key"][len(base) :] for o in page.get("Contents", [])]
            names.extend(n for n in sorted(found) if start_after is None or n > start_after)
            if limit is not None and len(names) >= limit:
                break
        names = sorted(set(names))
        return names[:limit] if limit is not None else names

    def entries(self, prefix: str) -> list[Entry]:
        base = self._key(prefix) + "/"
        out = []
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=base, Delimiter="/"
        ):
            for obj in page.get("Contents", []):
                modified = obj["LastModified"].timestamp()
                out.append(Entry(obj["Key"][len(base) :], modified, obj["ETag"].strip('"')))
        return sorted(out, key=lambda e: e.name)

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        from botocore.exceptions import ClientError

        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as err:
            if self._missing(err):
                return None
            raise
        return response["Body"].read(), str(response["ETag"]).strip('"')

    def delete_if(self, key: str, tag: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key), IfMatch=f'"{tag}"')
        except ClientError as err:
            status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if self._missing(err) or status == 412:
                return False
            raise
        return True

    def delete(self, key: str) -> None:
        full = self._key(key)
        keys = [full]
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full + "/")
        for page in pages:
            keys.extend(o["Key"] for o in page.get("Contents", []))
        for i in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[i : i + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})


_STORES: Registry[type[StateStore]] = Registry(
    "state store scheme",
    {"file": "squall.service.state:LocalStateStore", "s3": "squall.service.state:S3StateStore"},
    OptionError,
)


def register_state_store(scheme: str, target: str) -> None:
    """Make ``scheme://…`` URLs open ``target`` (``"module:Class"``)."""
    _STORES.register(scheme, target)


def state_store(url: str, **options: Any) -> StateStore:
    """Open the state store at ``url`` (``s3://bucket/prefix``, a folder, or another registered scheme)."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else "file"
    cls: Any = _STORES.get(scheme, where=repr(url))
    return cls(url, **options)
