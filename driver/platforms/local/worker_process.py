"""A local worker process: ``python -m squall.driver.platforms.local.worker_process ADDRESS RANK THREADS``.

Started by the local platform; connects back to the driver's Unix socket
(authenticated with ``SQUALL_WORKER_AUTHKEY``), says its rank, then serves
one query message after another until told to stop.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from multiprocessing.connection import Client, Connection

import pyarrow as pa

from squall.errors import UserError
from squall.exchange.base import ExchangeAborted, open_exchange
from squall.operators.worker import Worker
from squall.plan import Plan


def _stage_done(conn: Connection, rank: int, stage_id: int) -> None:
    conn.send(("stage", rank, stage_id))


def serve(conn: Connection, threads: int | None) -> None:
    """Worker process main loop: one message per query, ``None`` to stop."""
    if threads:
        pa.set_cpu_count(threads)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if msg is None:
            return
        rank = msg["rank"]
        try:
            plan = Plan.from_json(msg["plan"])
            exchange = open_exchange(msg["exchange"], rank, plan.world_size)
            try:
                worker = Worker(
                    plan,
                    rank,
                    exchange,
                    msg["query_id"],
                    threads=threads,
                    storage_options=msg.get("storage_options"),
                    on_stage=functools.partial(_stage_done, conn, rank),
                )
                result, report = worker.run()
            finally:
                exchange.close()
            if result is not None:
                path = msg["result_path"]
                tmp = path + ".tmp"
                with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, result.schema) as writer:
                    writer.write_table(result)
                os.replace(tmp, path)
            conn.send(("done", rank, report.to_dict()))
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
            conn.send(("error", rank, kind, message, traceback.format_exc()))


def main(argv: list[str]) -> int:
    """``ADDRESS RANK THREADS`` (started by the local platform; ranks started by a cluster launcher use
    :mod:`squall.driver.platforms.fabric.worker_process`)."""
    authkey = bytes.fromhex(os.environ["SQUALL_WORKER_AUTHKEY"])
    address, rank, threads = argv[0], int(argv[1]), int(argv[2])
    conn = Client(address, family="AF_UNIX", authkey=authkey)
    conn.send(rank)
    serve(conn, threads or None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
