"""The fabric platform: the same plans on an RDMA cluster, ranks trading data over libfabric.

Ranks are worker processes exactly like the local platform's; only the
exchange differs (``squall.exchange.fabric``: one registered receive window
per rank and exchange, RMA writes into disjoint offsets). Two ways to start
the ranks:

- ``launcher="local"`` (default): the driver starts W processes on this
  machine (``FI_PROVIDER=tcp`` with ``FI_TCP_IFACE=lo``, or ``shm``);
- ``launcher="external"``: the cluster's launcher starts them, e.g.
  ``srun -n W python -m squall.driver.platforms.fabric.worker_process --connect HEAD:PORT``
  (:mod:`squall.driver.platforms.fabric.worker_process`);
  each rank reads its rank from the launcher's environment
  (``OMPI_COMM_WORLD_RANK``, ``SLURM_PROCID``, ``PMI_RANK``) and connects
  back to the driver, authenticated by the shared ``SQUALL_WORKER_AUTHKEY``.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from multiprocessing.connection import Listener
from typing import Any, ClassVar

from squall.driver.platforms.local.platform import LocalPlatform
from squall.errors import OptionError
from squall.exchange import fabric as fabric_exchange


class FabricPlatform(LocalPlatform):
    """W ranks exchanging through libfabric (see module doc)."""

    name = "fabric"
    exchanges: ClassVar[tuple[str, ...]] = ("fabric",)
    storages: ClassVar[tuple[str, ...]] = ("file", "s3")  # a shared file system on a cluster
    options: ClassVar[tuple[str, ...]] = ("provider",)

    def __init__(
        self,
        workers: int | None = None,
        *,
        provider: str | None = None,
        launcher: str = "local",
        listen: str = "0.0.0.0:0",
        authkey: str | None = None,
        exchange: str | None = None,
        exchange_options: dict[str, Any] | None = None,
        storage_options: dict[str, Any] | None = None,
        threads_per_worker: int | None = None,
    ) -> None:
        reason = fabric_exchange.native_available()
        if reason:
            raise OptionError(f"the fabric platform needs libfabric: {reason}")
        self.check_exchange(exchange)
        if launcher not in ("local", "external"):
            raise OptionError(f"launcher must be 'local' or 'external', got {launcher!r}")
        options = dict(exchange_options or {})
        options.setdefault("provider", provider or os.environ.get("FI_PROVIDER") or "tcp")
        if launcher == "external":
            options.setdefault("host", "0.0.0.0")
        self.launcher = launcher
        self._listen = listen
        super().__init__(
            workers,
            exchange="fabric",
            exchange_options=options,
            storage_options=storage_options,
            threads_per_worker=threads_per_worker,
            worker_env={"FI_PROVIDER": options["provider"]},
        )
        if launcher == "external":
            key = authkey or os.environ.get("SQUALL_WORKER_AUTHKEY")
            if not key:
                key = secrets.token_hex(16)
            try:
                self._authkey = bytes.fromhex(key)
            except ValueError:
                raise OptionError(
                    "the fabric platform's authkey (SQUALL_WORKER_AUTHKEY) must be hexadecimal"
                ) from None
            self.authkey_hex = key

    def _spawns_locally(self) -> bool:
        return self.launcher == "local"

    def _get_listener(self) -> Listener:
        if self._listener is None:
            if self.launcher == "local":
                return super()._get_listener()
            host, _, port = self._listen.rpartition(":")
            self._listener = Listener((host or "0.0.0.0", int(port)), family="AF_INET", authkey=self._authkey)
        return self._listener

    @property
    def address(self) -> tuple[str, int]:
        """Where ranks started by the cluster launcher connect (``--connect HOST:PORT``)."""
        return self._get_listener().address

    def _spawn(self, rank: int) -> subprocess.Popen[bytes] | None:
        if self.launcher == "external":
            return None  # the cluster launcher starts the ranks; they connect to self.address
        return super()._spawn(rank)
