"""Exchange implementations the shared suite runs against.

Each backend knows how to stand up what its implementation needs for one test
(a folder, a moto S3 server, a libfabric provider) and yields an
``ExchangeFactory``. Add a backend by appending to ``BACKENDS``; every test in
``test_exchange_suite.py`` then runs against it.
"""

from __future__ import annotations

import contextlib
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


BACKENDS: list[Backend] = [Backend("local", _local)]
