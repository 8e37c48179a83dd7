"""Exchange implementations the shared suite runs against.

Each backend knows how to stand up what its implementation needs for one test
(a folder, a moto S3 server, a libfabric provider) and yields an
``ExchangeFactory``. Add a backend by appending to ``BACKENDS``; every test in
``test_exchange_suite.py`` then runs against it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from squall.exchange.base import ExchangeFactory


@dataclass(frozen=True)
class Backend:
    name: str
    #: context manager factory: (tmp_path) -> yields an ExchangeFactory
    open: Callable[[Path], contextlib.AbstractContextManager[ExchangeFactory]]
    #: environment variables the rank processes need (e.g. FI_PROVIDER)
    env: dict[str, str] | None = None
    #: reason to skip on this machine, or None
    skip: Callable[[], str | None] = lambda: None
    #: extra exchange config merged into the prepared config (e.g. short timeouts)
    extra: dict[str, Any] | None = None


@contextlib.contextmanager
def _local(tmp_path: Path) -> Iterator[ExchangeFactory]:
    from squall.exchange.local import LocalExchangeFactory

    yield LocalExchangeFactory(root=tmp_path / "xchg", timeout_s=20)


S3_BUCKET = "squall-exchange-test"


@contextlib.contextmanager
def _s3(tmp_path: Path, levels: int | str = "auto") -> Iterator[ExchangeFactory]:
    from squall.exchange.s3 import S3ExchangeFactory

    from ..s3server import moto_s3

    with moto_s3(S3_BUCKET) as s3:
        yield S3ExchangeFactory(
            f"s3://{S3_BUCKET}/{tmp_path.name}", levels=levels, timeout_s=20, endpoint_url=s3.endpoint_url
        )


def _s3_skip() -> str | None:
    from ..s3server import moto_available

    return moto_available()


BACKENDS: list[Backend] = [
    Backend("local", _local),
    Backend("s3", _s3, skip=_s3_skip),
    Backend("s3-2level", functools.partial(_s3, levels=2), skip=_s3_skip),
]


# --- fabric: the libfabric exchange on the tcp and shm providers (several real processes) ----------


def _fabric(provider: str, env: dict[str, str]) -> Callable[[Path], contextlib.AbstractContextManager]:
    @contextlib.contextmanager
    def open_fabric(tmp_path: Path) -> Iterator[ExchangeFactory]:
        from squall.exchange.fabric import FabricExchangeFactory

        factory = FabricExchangeFactory(provider=provider, timeout_s=20, env=env)
        try:
            yield factory
        finally:
            factory.close()

    return open_fabric


def _fabric_skip() -> str | None:
    """Skip only when the native module is missing (no libfabric, `make native` not run), saying why."""
    from squall.exchange.fabric import native_available

    return native_available()


FABRIC_TCP_ENV = {"FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo"}
FABRIC_SHM_ENV = {"FI_PROVIDER": "shm"}

BACKENDS += [
    Backend("fabric-tcp", _fabric("tcp", FABRIC_TCP_ENV), env=FABRIC_TCP_ENV, skip=_fabric_skip),
    Backend("fabric-shm", _fabric("shm", FABRIC_SHM_ENV), env=FABRIC_SHM_ENV, skip=_fabric_skip),
]
