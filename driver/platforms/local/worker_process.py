"""A local worker process: ``python -m squall.driver.platforms.local.worker_process ADDRESS SLOT THREADS``.

Started by the local platform's worker pool; connects back to the driver's Unix socket
(authenticated with ``SQUALL_WORKER_AUTHKEY``), says its slot in the pool, then serves
one query message after another until told to stop; each message says which rank it plays
(and how many threads it may use). Every message it sends is
``(tag, query_id, rank, …)``: the driver discards those of a query that is no longer
running. It ignores SIGINT: the driver alone decides what a Ctrl-C stops. It dies with the
driver: Linux kills it when the driver's thread that started it ends (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
import traceback
from multiprocessing.connection import Client, Connection
from typing import Any, NoReturn

import pyarrow as pa

from squall.errors import UserError
from squall.exchange.base import ExchangeAborted, open_exchange
from squall.operators.duck import prepare_spares
from squall.operators.memory import sandbox_memory
from squall.operators.worker import Worker
from squall.plan import Plan
from squall.warmup import warm_conversions

USAGE = "usage: python -m squall.driver.platforms.local.worker_process ADDRESS SLOT THREADS"
#: prctl(2) option: the signal this process gets when its parent (thread) ends
PR_SET_PDEATHSIG = 1
ABOUT = (
    "a Squall worker; the local platform starts it with SQUALL_WORKER_AUTHKEY set "
    "(not meant to be run by hand)"
)


def fail(message: str, usage: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` and the usage line to stderr and exit with ``code``."""
    print(f"error: {message}", file=sys.stderr)
    print(usage, file=sys.stderr)
    raise SystemExit(code)


def authkey_from_env(usage: str) -> bytes:
    """``SQUALL_WORKER_AUTHKEY`` (hex) as bytes; a one-line error and exit 2 when missing or not hex."""
    text = os.environ.get("SQUALL_WORKER_AUTHKEY")
    if not text:
        fail("SQUALL_WORKER_AUTHKEY is not set (the driver that starts this worker sets it)", usage)
    try:
        return bytes.fromhex(text)
    except ValueError:
        fail("SQUALL_WORKER_AUTHKEY must be hexadecimal", usage)


def connect(address: str | tuple[str, int], family: str, authkey: bytes, usage: str) -> Connection:
    """Connect to the driver; a one-line error and exit 1 when it cannot be reached or refuses the key."""
    try:
        return Client(address, family=family, authkey=authkey)
    except (OSError, EOFError) as exc:
        fail(f"cannot connect to the driver at {address}: {exc}", usage, 1)
    except Exception as exc:  # multiprocessing.AuthenticationError
        fail(f"the driver at {address} refused this worker: {exc}", usage, 1)


def _stage_done(conn: Connection, query_id: str, rank: int, stage_id: int) -> None:
    conn.send(("stage", query_id, rank, stage_id))


def result_part_path(path: str, rank: int) -> str:
    """Where ``rank`` writes its result: the query's result path on rank 0; a part file for the
    other ranks of a result stage that runs on several ranks (a range-partitioned ORDER BY)."""
    return path if rank == 0 else f"{path}.rank{rank}"


def die_with_parent(parent: int | None) -> None:
    """Ask Linux to SIGKILL this process when the driver thread that started it ends (``PR_SET_PDEATHSIG``), and
    exit at once if ``parent`` (the driver's pid) is already gone. Elsewhere than on Linux: nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if parent is not None and os.getppid() != parent:
        os._exit(1)  # the driver died before the signal was armed


@functools.lru_cache(maxsize=4)
def _memory_options(budget: int | None, spill_root: str | None, spill_bytes: int | None) -> dict[str, Any]:
    """The Sandbox options that keep this worker within ``budget`` bytes, spilling at most ``spill_bytes`` to a
    folder of its own under ``spill_root`` (the same for every query of the same budget, so the kept DuckDB
    instances are reused; DuckDB removes its spill files when a query's data goes)."""
    if not budget or not spill_root:
        return {}
    folder = os.path.join(spill_root, f"w{os.getpid()}")
    os.makedirs(folder, exist_ok=True)
    return {**sandbox_memory(int(budget), folder, spill_bytes), "reuse": True}


@functools.lru_cache(maxsize=16)
def _plan(text: str) -> Plan:
    """The plan of this JSON text, decoded once: a connection's repeated query sends the same text (a TPC-DS plan
    takes 0.1-2 ms to decode; a plan is immutable, so the ranks of one process may share it)."""
    return Plan.from_json(text)


def serve(conn: Connection, threads: int | None) -> None:
    """Worker process main loop: one message per query, ``None`` to stop. ``threads``: DuckDB and Arrow threads
    unless a message says otherwise."""
    current = threads
    if threads:
        pa.set_cpu_count(threads)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if msg is None:
            return
        rank, query_id = msg["rank"], msg["query_id"]
        wanted = msg.get("threads") or threads
        if wanted and wanted != current:
            pa.set_cpu_count(wanted)
            current = wanted
        try:
            plan = _plan(msg["plan"])
            exchange = open_exchange(msg["exchange"], rank, plan.world_size)
            try:
                worker = Worker(
                    plan,
                    rank,
                    exchange,
                    msg["query_id"],
                    threads=wanted,
                    storage_options=msg.get("storage_options"),
                    on_stage=functools.partial(_stage_done, conn, query_id, rank),
                    sandbox_options=_memory_options(
                        msg.get("memory_budget"), msg.get("spill_root"), msg.get("spill_bytes")
                    ),
                    memory_budget=msg.get("memory_budget"),
                    sandbox_group=msg.get("sandbox_group", ""),
                    cores=msg.get("cores"),
                )
                result, report = worker.run()
            finally:
                exchange.close()
            if result is not None:
                path = result_part_path(msg["result_path"], rank)
                tmp = path + ".tmp"
                with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, result.schema) as writer:
                    writer.write_table(result)
                os.replace(tmp, path)
            conn.send(("done", query_id, rank, report.to_dict()))
        except BaseException as exc:  # report everything; the driver decides what the user sees
            kind = (
                "user"
                if isinstance(exc, UserError)
                else "aborted"
                if isinstance(exc, ExchangeAborted)
                else "error"
            )
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if kind == "error":
                message = f"{type(exc).__name__}: {message}"
            conn.send(("error", query_id, rank, kind, message, traceback.format_exc()))
        finally:
            # idle until the next query: nothing of this one held (its result, its worker's state), and the
            # memory Arrow's allocator kept for reuse given back
            worker = result = report = plan = exchange = None  # type: ignore[assignment]
            pa.default_memory_pool().release_unused()
        if not conn.poll(0):  # idle: the next new DuckDB instance made ahead, and pyarrow's first conversion
            prepare_spares()
            warm_conversions()


def main(argv: list[str]) -> int:
    """``ADDRESS SLOT THREADS`` (started by the local platform; ranks started by a cluster launcher use
    :mod:`squall.driver.platforms.fabric.worker_process`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    driver = os.environ.get("SQUALL_DRIVER_PID", "")
    die_with_parent(int(driver) if driver.isdigit() else None)
    if any(a in ("-h", "--help") for a in argv):
        print(f"{USAGE}\n{ABOUT}")
        return 0
    if len(argv) != 3:
        fail(f"expected ADDRESS SLOT THREADS, got {len(argv)} argument(s)", USAGE)
    try:
        address, slot, threads = argv[0], int(argv[1]), int(argv[2])
    except ValueError:
        fail(f"SLOT and THREADS must be integers, got {argv[1]!r} and {argv[2]!r}", USAGE)
    conn = connect(address, "AF_UNIX", authkey_from_env(USAGE), USAGE)
    conn.send(slot)
    serve(conn, threads or None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
