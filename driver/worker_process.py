"""A local worker process: ``python -m squall.driver.worker_process ADDRESS RANK THREADS``.

Started by the local platform; connects back to the driver's Unix socket
(authenticated with ``SQUALL_WORKER_AUTHKEY``), says its rank, then serves
one query message after another until told to stop.
"""

from __future__ import annotations

import os
import sys
import traceback
from multiprocessing.connection import Client, Connection

import pyarrow as pa

from squall.errors import UserError
from squall.exchange.base import ExchangeAborted, open_exchange
from squall.operators.worker import Worker
from squall.plan import Plan


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
                    on_stage=lambda sid, r=rank: conn.send(("stage", r, sid)),
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


#: environment variables cluster launchers set: (rank, size)
LAUNCHER_ENV = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),  # Open MPI mpirun
    ("PMI_RANK", "PMI_SIZE"),  # MPICH / Intel MPI hydra
    ("PMIX_RANK", "PMIX_SIZE"),  # PMIx launchers
    ("SLURM_PROCID", "SLURM_NTASKS"),  # srun
)


def launcher_rank(environ: dict[str, str] | None = None) -> tuple[int, int]:
    """(rank, size) from the cluster launcher's environment (mpirun, srun, PMI)."""
    env = os.environ if environ is None else environ
    for rank_var, size_var in LAUNCHER_ENV:
        if rank_var in env and size_var in env:
            return int(env[rank_var]), int(env[size_var])
    names = ", ".join(r for r, _s in LAUNCHER_ENV)
    raise SystemExit(
        f"error: no launcher rank in the environment (looked for {names}); start with mpirun or srun"
    )


def main(argv: list[str]) -> int:
    """Local: ``ADDRESS RANK THREADS`` (started by the local platform).
    Cluster: ``--connect HOST:PORT [--threads N]`` (started by mpirun/srun; rank from the launcher)."""
    authkey = bytes.fromhex(os.environ["SQUALL_WORKER_AUTHKEY"])
    if argv and argv[0] == "--connect":
        host, _, port = argv[1].rpartition(":")
        threads = int(argv[3]) if len(argv) > 3 and argv[2] == "--threads" else 0
        rank, _size = launcher_rank()
        conn = Client((host, int(port)), family="AF_INET", authkey=authkey)
    else:
        address, rank, threads = argv[0], int(argv[1]), int(argv[2])
        conn = Client(address, family="AF_UNIX", authkey=authkey)
    conn.send(rank)
    serve(conn, threads or None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
