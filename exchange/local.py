"""Local exchange: a shared folder (``/dev/shm`` when it exists), the embedded default.

Layout under the query folder ``<root>/<query_id>/``::

    x<exchange>/s<sender>-r<receiver>.arrow   one Arrow IPC file per receiver (hash, gather)
    x<exchange>/s<sender>-all.arrow           one file every receiver reads (broadcast)
    x<exchange>/s<sender>.done                written last: the sender's parts are complete
    x<exchange>/z<sender>.size                "<rows> <bytes>" the sender published (``sizes``)
    ABORT                                     the query was aborted; holds the reason
    .owner                                    the pid of the driver that made the folder (for orphan clean-up)
    claims/<item>                             a claimed work item; holds the owner's rank

A claim (and a published size) is a hard link of a finished temporary file to ``claims/<item>``: ``link`` fails
with EEXIST when the item is taken, so exactly one rank (process) wins, and the file
always holds its owner's rank in full.

Files are written under a temporary name and renamed, so a reader never sees a
partial file and a repeated send replaces identical data (harmless). Readers
memory-map the files: receiving is zero-copy. A rank's part for itself is never written: the endpoint keeps
it and hands it to the same rank's receive (no copy in the folder's memory, ``/dev/shm``, and none mapped back).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from squall.exchange.base import (
    Exchange,
    ExchangeAborted,
    ExchangeFactory,
    ExchangeSpec,
    ExchangeTimeout,
    check_item,
    check_number,
    claim_result,
    concat,
    format_sizes,
    parse_sizes,
)

DEFAULT_TIMEOUT_S = 600.0
#: a receiver polls for its senders' done markers every FAST_POLL_S for the first FAST_POLL_FOR_S of a wait,
#: then every SLOW_POLL_S
FAST_POLL_S = 0.001
FAST_POLL_FOR_S = 0.25
SLOW_POLL_S = 0.01


#: in a query's folder: the pid of the process that made it (a folder whose process is gone is an orphan, see
#: squall.service.recovery)
OWNER_FILE = ".owner"


def default_root() -> Path:
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return shm / "squall"
    return Path(tempfile.gettempdir()) / "squall"


def _write_ipc(path: Path, table: pa.Table) -> int:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    size = tmp.stat().st_size
    os.replace(tmp, path)
    return size


def _read_ipc(path: Path) -> pa.Table:
    with pa.memory_map(str(path), "r") as source:
        return pa.ipc.open_file(source).read_all()


class LocalExchange(Exchange):
    """Endpoint over the shared query folder (see module doc)."""

    name = "local"
    #: ``aborted()`` is one stat: a worker asks it this often while a stage runs (a cancel interrupts the stage)
    abort_poll_s = 0.1

    def __init__(self, config: Mapping[str, Any], rank: int, world_size: int) -> None:
        super().__init__(config, rank, world_size)
        self.folder = Path(config["folder"])
        self.timeout_s = float(config.get("timeout_s", DEFAULT_TIMEOUT_S))
        #: this rank's part for itself, by exchange id: handed to its own receive, never written to the folder
        self._own: dict[int, pa.Table] = {}

    def aborted(self) -> bool:
        """The ABORT file exists (one stat call)."""
        return (self.folder / "ABORT").exists()

    supports_claims = True

    def _claims_dir(self) -> Path:
        path = self.folder / "claims"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def claim(self, query_id: str, item: str) -> bool:
        """Take ``item`` with an atomic ``link`` (module doc); True if this rank owns it."""
        target = self._claims_dir() / check_item(item)
        tmp = target.with_name(f".{item}.{uuid.uuid4().hex[:8]}")
        tmp.write_text(str(self.rank))
        try:
            os.link(tmp, target)
            new = True
        except FileExistsError:
            new = False
        finally:
            tmp.unlink(missing_ok=True)
        self._stats.count("claim")
        owner = self.rank if new else int(target.read_text())
        return claim_result(self._stats, owner, self.rank, new)

    def claims(self, query_id: str, prefix: str = "") -> dict[str, int]:
        """Owners of the claimed items starting with ``prefix`` (one directory listing)."""
        self._stats.count("list")
        self._stats.count_claim("list")
        out: dict[str, int] = {}
        for entry in os.scandir(self._claims_dir()):
            if entry.name.startswith(prefix) and not entry.name.startswith("."):
                out[entry.name] = int(Path(entry.path).read_text())
        return out

    supports_sizes = True

    def sizes(self, spec: ExchangeSpec, rows: int, nbytes: int) -> dict[int, tuple[int, int]]:
        """Publish ``z<rank>.size`` with an atomic ``link`` (the first copy wins), wait for every
        sender's, read them (one small file each; see the base class)."""
        folder = self._dir(spec)
        if self.rank in spec.senders:
            target = folder / f"z{self.rank}.size"
            tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}")
            tmp.write_text(format_sizes(rows, nbytes))
            try:
                os.link(tmp, target)
            except FileExistsError:
                pass  # a retried or duplicated sender: the first value stands
            finally:
                tmp.unlink(missing_ok=True)
            self._stats.count("write")
        self._wait(spec, folder, "z{}.size")
        self._stats.count("read", len(spec.senders))
        return {s: parse_sizes((folder / f"z{s}.size").read_text()) for s in sorted(spec.senders)}

    def _dir(self, spec: ExchangeSpec) -> Path:
        path = self.folder / f"x{spec.exchange_id}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def send(self, spec: ExchangeSpec, parts: Mapping[int, pa.Table]) -> None:
        folder = self._dir(spec)
        schema = next(iter(parts.values())).schema if parts else pa.schema([])
        written = 0
        rows = 0
        if spec.kind == "broadcast":
            table = next(iter(parts.values())) if parts else schema.empty_table()
            if self.rank in spec.receivers:
                self._own[spec.exchange_id] = table
                written += table.nbytes
            if any(r != self.rank for r in spec.receivers):
                written += _write_ipc(folder / f"s{self.rank}-all.arrow", table)
                self._stats.count("write")
            rows += table.num_rows * len(spec.receivers)
        else:
            for receiver in spec.receivers:
                table = parts.get(receiver)
                if table is None:
                    table = schema.empty_table()
                rows += table.num_rows
                if receiver == self.rank:
                    self._own[spec.exchange_id] = table
                    written += table.nbytes
                    continue
                written += _write_ipc(folder / f"s{self.rank}-r{receiver}.arrow", table)
                self._stats.count("write")
        (folder / f"s{self.rank}.done").touch()
        self._stats.bytes_sent += written
        self._stats.rows_sent += rows
        self._stats.per_exchange.append(
            {"exchange_id": spec.exchange_id, "kind": spec.kind, "bytes_sent": written, "rows_sent": rows}
        )

    def _wait(self, spec: ExchangeSpec, folder: Path, marker: str = "s{}.done") -> None:
        start = time.monotonic()
        deadline = start + self.timeout_s
        pending = set(spec.senders)
        delay = 0.0005
        while True:
            pending = {s for s in pending if not (folder / marker.format(s)).exists()}
            if not pending:
                return
            abort = self.folder / "ABORT"
            if abort.exists():
                raise ExchangeAborted(abort.read_text(errors="replace").strip() or "query aborted")
            if time.monotonic() > deadline:
                missing = ", ".join(str(s) for s in sorted(pending))
                raise ExchangeTimeout(
                    f"exchange {spec.exchange_id}: no data from rank(s) {missing} after {self.timeout_s:.0f} s"
                )
            time.sleep(delay)
            # poll every ms while the wait is short (a stage boundary: a sender a few ms behind), back off
            # to 10 ms in long waits; a 10 ms cap from the start overshot a typical boundary by ~5 ms
            delay = min(delay * 2, FAST_POLL_S if time.monotonic() - start < FAST_POLL_FOR_S else SLOW_POLL_S)

    def receive(self, spec: ExchangeSpec) -> pa.Table:
        folder = self._dir(spec)
        self._wait(spec, folder)
        tables = []
        for sender in sorted(spec.senders):
            if sender == self.rank and spec.exchange_id in self._own:
                tables.append(self._own.pop(spec.exchange_id))
                continue
            name = f"s{sender}-all.arrow" if spec.kind == "broadcast" else f"s{sender}-r{self.rank}.arrow"
            tables.append(_read_ipc(folder / name))
            self._stats.count("read")
        received = concat(tables, None)
        nbytes = received.nbytes
        self._stats.bytes_received += nbytes
        self._stats.rows_received += received.num_rows
        self._stats.per_exchange.append(
            {
                "exchange_id": spec.exchange_id,
                "kind": spec.kind,
                "bytes_received": nbytes,
                "rows_received": received.num_rows,
            }
        )
        return received


class LocalExchangeFactory(ExchangeFactory):
    """Creates and deletes the per-query folder under ``root``."""

    name = "local"

    def __init__(self, root: str | os.PathLike[str] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S):
        check_number("timeout_s", timeout_s)
        self.root = Path(root) if root is not None else default_root()
        self.timeout_s = float(timeout_s)

    def prepare(self, query_id: str, world_size: int) -> dict[str, Any]:
        folder = self.root / query_id
        folder.mkdir(parents=True, exist_ok=False)
        (folder / OWNER_FILE).write_text(f"{os.getpid()}\n")  # whose it is, if it is ever left behind
        return {"name": self.name, "folder": str(folder), "timeout_s": self.timeout_s}

    def abort(self, config: Mapping[str, Any], reason: str = "query aborted") -> None:
        folder = Path(config["folder"])
        if folder.is_dir():
            (folder / "ABORT").write_text(reason)

    def cleanup(self, config: Mapping[str, Any]) -> None:
        shutil.rmtree(config["folder"], ignore_errors=True)
