"""A rank started by a cluster launcher: ``python -m squall.driver.platforms.fabric.worker_process --connect HOST:PORT [--threads N]``.

For the fabric platform with ``launcher="external"`` (e.g. ``srun -n W python -m
squall.driver.platforms.fabric.worker_process --connect HEAD:PORT``): the rank comes from the
launcher's environment (:func:`launcher_rank`); the process connects back to the driver over TCP
(authenticated with ``SQUALL_WORKER_AUTHKEY``), says its rank, then serves queries exactly like a
local worker process (:func:`squall.driver.platforms.local.worker_process.serve`).
"""

from __future__ import annotations

import os
import signal
import sys

from squall.driver.platforms.local.worker_process import authkey_from_env, connect, fail, serve

USAGE = "usage: python -m squall.driver.platforms.fabric.worker_process --connect HOST:PORT [--threads N]"
ABOUT = (
    "a Squall rank started by a cluster launcher (mpirun, srun) with SQUALL_WORKER_AUTHKEY set to the "
    "driver's key (hex)"
)

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
    """``--connect HOST:PORT [--threads N]`` (started by mpirun/srun; rank from the launcher)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if any(a in ("-h", "--help") for a in argv):
        print(f"{USAGE}\n{ABOUT}")
        return 0
    if len(argv) not in (2, 4) or argv[0] != "--connect" or (len(argv) == 4 and argv[2] != "--threads"):
        fail("expected --connect HOST:PORT [--threads N]", USAGE)
    host, _, port = argv[1].rpartition(":")
    try:
        port_number = int(port)
        threads = int(argv[3]) if len(argv) == 4 else 0
    except ValueError:
        fail(f"PORT and N must be integers, got {argv[1]!r}", USAGE)
    if not host:
        fail(f"--connect needs HOST:PORT, got {argv[1]!r}", USAGE)
    authkey = authkey_from_env(USAGE)
    rank, _size = launcher_rank()
    conn = connect((host, port_number), "AF_INET", authkey, USAGE)
    conn.send(rank)
    serve(conn, threads or None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
