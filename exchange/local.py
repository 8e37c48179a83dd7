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

A folder in memory (``/dev/shm``) is RAM that no worker's memory budget counts: once the file system holds
``memory_limit`` bytes (default :data:`MEMORY_SHARE` of the machine's memory when the root is in memory), a
sender writes its file on disk instead (``overflow``: ``<temp>/squall-<driver pid>-exchange/<query_id>/``,
removed with the query; a killed driver's by the next one's sweep) and links it into the query folder under
the same name, so receivers find it where they always do.
A stage's output streamed by :meth:`LocalExchange.send_pieces` past :data:`STREAM_HELD_BYTES` is written as it
comes, its rank's own part too, and on disk when the folder's memory has a limit.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack
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
#: a streamed send holds its pieces in memory up to this many bytes (then sends them as one ``send``); past it,
#: it writes them to files as they come
STREAM_HELD_BYTES = 64 << 20
#: of the machine's memory, what the exchange's files may hold in a root in memory before they go to disk
MEMORY_SHARE = 0.1
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


def in_memory(path: Path) -> bool:
    """Whether ``path`` is on a file system in RAM (tmpfs, as ``/dev/shm``)."""
    best, kind = "", ""
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) > 2 and str(path).startswith(fields[1]) and len(fields[1]) >= len(best):
                best, kind = fields[1], fields[2]
    except OSError:
        return False
    return kind in ("tmpfs", "ramfs")


def default_memory_limit(root: Path) -> int:
    """:data:`MEMORY_SHARE` of the machine's memory when ``root`` is in memory, else 0 (no limit)."""
    if not in_memory(root):
        return 0
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * MEMORY_SHARE)


class _Placed:
    """Where a file of the query folder is written: in the folder, or on disk (overflow) and linked into it."""

    def __init__(self, path: Path, overflow: Path | None) -> None:
        self.path, self.overflow = path, overflow
        home = overflow if overflow is not None else path.parent
        if overflow is not None:
            overflow.mkdir(parents=True, exist_ok=True)
        self.tmp = home / f".{path.parent.name}-{path.name}.{uuid.uuid4().hex[:8]}"

    def commit(self) -> int:
        size = self.tmp.stat().st_size
        if self.overflow is None:
            os.replace(self.tmp, self.path)
            return size
        final = self.overflow / f"{self.path.parent.name}-{self.path.name}"
        os.replace(self.tmp, final)
        link = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:8]}")
        os.symlink(final, link)
        os.replace(link, self.path)
        return size

    def options(self) -> pa.ipc.IpcWriteOptions:
        """Files on disk are LZ4-compressed (disk bandwidth and space, not memory, bound them)."""
        return pa.ipc.IpcWriteOptions(compression="lz4" if self.overflow is not None else None)


def _write_ipc(placed: _Placed, table: pa.Table) -> int:
    with (
        pa.OSFile(str(placed.tmp), "wb") as sink,
        pa.ipc.new_file(sink, table.schema, options=placed.options()) as writer,
    ):
        writer.write_table(table)
    return placed.commit()


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
        self.memory_limit = int(config.get("memory_limit", 0))
        self.overflow = Path(config["overflow"]) if config.get("overflow") else None

    def _place(self, path: Path, nbytes: int) -> _Placed:
        """Where to write ``path`` of ``nbytes`` (module doc: on disk once the folder's memory holds its limit)."""
        full = (
            self.overflow is not None
            and self.memory_limit > 0
            and shutil.disk_usage(self.folder).used + nbytes > self.memory_limit
        )
        return _Placed(path, self.overflow if full else None)

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
                path = folder / f"s{self.rank}-all.arrow"
                written += _write_ipc(self._place(path, table.nbytes), table)
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
                path = folder / f"s{self.rank}-r{receiver}.arrow"
                written += _write_ipc(self._place(path, table.nbytes), table)
                self._stats.count("write")
        self._sent(spec, folder, rows, written)

    def send_pieces(
        self, spec: ExchangeSpec, schema: pa.Schema, pieces: Iterable[Mapping[int, pa.Table]]
    ) -> None:
        """Pieces held while they stay within :data:`STREAM_HELD_BYTES`, then sent as :meth:`send` does; a larger
        output is appended to every receiver's file (its rank's own too) as the pieces come, on disk when the
        folder's memory has a limit (a stream's size is not known when its files are opened; module doc)."""
        if spec.kind == "broadcast":
            super().send_pieces(spec, schema, pieces)
            return
        held: dict[int, list[pa.Table]] = {r: [] for r in spec.receivers}
        held_bytes = rows = 0
        stream = iter(pieces)
        for piece in stream:
            for receiver, table in piece.items():
                if table.num_rows:
                    held[receiver].append(table)
                    held_bytes, rows = held_bytes + table.nbytes, rows + table.num_rows
            if held_bytes > STREAM_HELD_BYTES:
                break
        else:
            self.send(spec, {r: concat(tables, schema) for r, tables in held.items()})
            return
        folder = self._dir(spec)
        overflow = self.overflow if self.memory_limit else None
        placed = {r: _Placed(folder / f"s{self.rank}-r{r}.arrow", overflow) for r in spec.receivers}
        with ExitStack() as stack:
            writers = {
                r: stack.enter_context(
                    pa.ipc.new_file(
                        stack.enter_context(pa.OSFile(str(p.tmp), "wb")), schema, options=p.options()
                    )
                )
                for r, p in placed.items()
            }
            for r, tables in held.items():
                for table in tables:
                    writers[r].write_table(table)
            del held
            for piece in stream:
                for receiver, table in piece.items():
                    if table.num_rows:
                        writers[receiver].write_table(table)
                        rows += table.num_rows
        written = 0
        for p in placed.values():
            written += p.commit()
            self._stats.count("write")
        self._sent(spec, folder, rows, written)

    def _sent(self, spec: ExchangeSpec, folder: Path, rows: int, written: int) -> None:
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

    def _path(self, spec: ExchangeSpec, folder: Path, sender: int) -> Path:
        return folder / (
            f"s{sender}-all.arrow" if spec.kind == "broadcast" else f"s{sender}-r{self.rank}.arrow"
        )

    def receive(self, spec: ExchangeSpec) -> pa.Table:
        folder = self._dir(spec)
        self._wait(spec, folder)
        tables = []
        for sender in sorted(spec.senders):
            if sender == self.rank and spec.exchange_id in self._own:
                tables.append(self._own.pop(spec.exchange_id))
                continue
            tables.append(_read_ipc(self._path(spec, folder, sender)))
            self._stats.count("read")
        received = concat(tables, None)
        self._received(spec, received.num_rows, received.nbytes)
        return received

    def receive_in_place(self, spec: ExchangeSpec, limit: int) -> tuple[Any, int, int] | None:
        """The senders' files (and this rank's own part, when held) as one dataset, when they pass ``limit``
        (bytes: the files' sizes, LZ4-compressed on disk, plus the own part's Arrow bytes)."""
        folder = self._dir(spec)
        self._wait(spec, folder)
        own = self._own.get(spec.exchange_id) if self.rank in spec.senders else None
        paths = [
            str(self._path(spec, folder, s))
            for s in sorted(spec.senders)
            if not (s == self.rank and own is not None)
        ]
        nbytes = sum(os.path.getsize(p) for p in paths) + (own.nbytes if own is not None else 0)
        if nbytes <= limit:
            return None
        import pyarrow.dataset as ds  # ~0.2 s to import: only for an input this big

        files = ds.dataset(paths, format="ipc")
        data = files if own is None else ds.dataset([ds.dataset(own), files])
        rows = data.count_rows()
        if own is not None:
            self._own.pop(spec.exchange_id)
        self._stats.count("read", len(paths))
        self._received(spec, rows, nbytes)
        return data, rows, nbytes

    def receive_pieces(self, spec: ExchangeSpec) -> Iterator[pa.Table]:
        """Each sender's part a record batch at a time, read into memory (not mapped: a piece's memory is
        freed once the caller lets go of it)."""
        folder = self._dir(spec)
        self._wait(spec, folder)
        rows = nbytes = 0
        schema: pa.Schema | None = None
        for sender in sorted(spec.senders):
            if sender == self.rank and spec.exchange_id in self._own:
                own = self._own.pop(spec.exchange_id)
                schema, rows, nbytes = own.schema, rows + own.num_rows, nbytes + own.nbytes
                yield own
                continue
            with pa.OSFile(str(self._path(spec, folder, sender))) as source:
                reader = pa.ipc.open_file(source)
                schema = reader.schema
                for i in range(reader.num_record_batches):
                    piece = pa.Table.from_batches([reader.get_batch(i)])
                    rows, nbytes = rows + piece.num_rows, nbytes + piece.nbytes
                    yield piece
            self._stats.count("read")
        if rows == 0:
            yield (schema or pa.schema([])).empty_table()
        self._received(spec, rows, nbytes)

    def _received(self, spec: ExchangeSpec, rows: int, nbytes: int) -> None:
        self._stats.bytes_received += nbytes
        self._stats.rows_received += rows
        self._stats.per_exchange.append(
            {
                "exchange_id": spec.exchange_id,
                "kind": spec.kind,
                "bytes_received": nbytes,
                "rows_received": rows,
            }
        )


class LocalExchangeFactory(ExchangeFactory):
    """Creates and deletes the per-query folder under ``root``."""

    name = "local"

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        memory_limit: int | None = None,
    ):
        check_number("timeout_s", timeout_s)
        self.root = Path(root) if root is not None else default_root()
        self.timeout_s = float(timeout_s)
        if memory_limit is not None:
            check_number("memory_limit", memory_limit, int)
        #: bytes the root's file system may hold before senders write to disk (module doc); 0: no limit
        self.memory_limit = default_memory_limit(self.root) if memory_limit is None else int(memory_limit)

    def prepare(self, query_id: str, world_size: int) -> dict[str, Any]:
        folder = self.root / query_id
        folder.mkdir(parents=True, exist_ok=False)
        (folder / OWNER_FILE).write_text(f"{os.getpid()}\n")  # whose it is, if it is ever left behind
        config: dict[str, Any] = {"name": self.name, "folder": str(folder), "timeout_s": self.timeout_s}
        if self.memory_limit:
            overflow = Path(tempfile.gettempdir()) / f"squall-{os.getpid()}-exchange" / query_id
            config.update(memory_limit=self.memory_limit, overflow=str(overflow))
        return config

    def abort(self, config: Mapping[str, Any], reason: str = "query aborted") -> None:
        folder = Path(config["folder"])
        if folder.is_dir():
            (folder / "ABORT").write_text(reason)

    def cleanup(self, config: Mapping[str, Any]) -> None:
        shutil.rmtree(config["folder"], ignore_errors=True)
        if config.get("overflow"):
            shutil.rmtree(config["overflow"], ignore_errors=True)
