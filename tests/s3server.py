"""A real S3 API for tests: moto's server on loopback, one per test session.

``moto_s3()`` starts the server on a free port the first time it is entered
(later calls reuse it; it stops when the interpreter exits), points the
standard AWS settings at it — ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID=testing``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION`` — in ``os.environ`` while the
context is open, so rank processes spawned meanwhile inherit them, and creates
the requested buckets::

    with moto_s3("squall-test") as s3:
        client = s3.client()
        ...
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}

_lock = threading.Lock()
_server: Any = None
_endpoint: str | None = None


@dataclass(frozen=True)
class MotoS3:
    """The running server: its endpoint and the environment that points at it."""

    endpoint_url: str

    @property
    def env(self) -> dict[str, str]:
        return {**ENV, "AWS_ENDPOINT_URL": self.endpoint_url}

    def client(self, **config: Any) -> Any:
        """A plain boto3 S3 client for the server (``config``: botocore Config options)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=ENV["AWS_DEFAULT_REGION"],
            config=Config(**config),
        )

    def create_bucket(self, name: str) -> None:
        client = self.client()
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=name)


def _start() -> str:
    global _server, _endpoint
    with _lock:
        if _endpoint is None:
            from moto.server import ThreadedMotoServer

            logging.getLogger("werkzeug").setLevel(logging.ERROR)
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            server.start()
            host, port = server.get_host_and_port()
            _server, _endpoint = server, f"http://{host}:{port}"
            atexit.register(server.stop)
        return _endpoint


@contextlib.contextmanager
def moto_s3(*buckets: str) -> Iterator[MotoS3]:
    """The session's moto S3 server (started on first use) with ``buckets`` created."""
    s3 = MotoS3(_start())
    saved = {name: os.environ.get(name) for name in s3.env}
    os.environ.update(s3.env)
    try:
        for name in buckets:
            s3.create_bucket(name)
        yield s3
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def moto_available() -> str | None:
    """None when moto's server can run here, else the reason to skip."""
    try:
        import boto3  # noqa: F401
        from moto.server import ThreadedMotoServer  # noqa: F401
    except ImportError as exc:
        return f"moto[server]/boto3 not installed: {exc}"
    return None
