"""Storage implementations the contract suite runs against.

Each backend stands up what its Storage needs for one test (a folder, a bucket
on moto's S3 server) and yields a :class:`Site`: the Storage, a way to put a
file, and the location of a relative path. Add a backend by appending to
``BACKENDS``; every test in ``test_storage_contract.py`` then runs against it.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from squall.operators.storage import Storage, storage_for


@dataclass
class Site:
    """One test's storage: ``url(rel)`` is the location of a relative path, ``put`` writes one there."""

    storage: Storage
    url: Callable[[str], str]
    put: Callable[[str, bytes], None]


@dataclass(frozen=True)
class Backend:
    name: str
    #: context manager factory: (tmp_path) -> yields a Site
    open: Callable[[Path], contextlib.AbstractContextManager[Site]]
    #: reason to skip on this machine, or None
    skip: Callable[[], str | None] = lambda: None


@contextlib.contextmanager
def _local(tmp_path: Path) -> Iterator[Site]:
    root = tmp_path / "data"
    root.mkdir()

    def put(rel: str, body: bytes) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)

    yield Site(storage_for(str(root)), lambda rel: str(root / rel), put)


S3_BUCKET = "squall-storage-suite"


@contextlib.contextmanager
def _s3(tmp_path: Path) -> Iterator[Site]:
    from ..s3server import moto_s3

    with moto_s3(S3_BUCKET) as s3:
        client = s3.client()
        prefix = f"{tmp_path.name}-{uuid.uuid4().hex[:6]}"

        def put(rel: str, body: bytes) -> None:
            client.put_object(Bucket=S3_BUCKET, Key=f"{prefix}/{rel}", Body=body)

        # coalesce_bytes=0: every column chunk is its own range, so projection shows in the bytes read
        options: dict[str, Any] = {"endpoint_url": s3.endpoint_url, "coalesce_bytes": 0}
        storage = storage_for(f"s3://{S3_BUCKET}/", options)
        try:
            yield Site(storage, lambda rel: f"s3://{S3_BUCKET}/{prefix}/{rel}", put)
        finally:
            close = getattr(storage, "close", None)
            if close is not None:
                close()


def _s3_skip() -> str | None:
    from ..s3server import moto_available

    return moto_available()


BACKENDS: list[Backend] = [
    Backend("local", _local),
    Backend("s3", _s3, skip=_s3_skip),
]
