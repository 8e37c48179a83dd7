"""All-to-all throughput of the fabric exchange vs mpi4py ``Alltoallv`` and a memcpy bound.

One ``mpirun`` launches W ranks; every rank builds the same data (a table of
int64 keys and float64 values, hash-partitioned by key into W parts, the
partitioning outside every timing) and then, in the same processes:

- ``memcpy``: numpy copies the bytes this rank sends (the bound no exchange beats);
- ``mpi``: ``Alltoallv`` of the partitions' Arrow IPC bytes (pre-serialized: transport only), Open
  MPI's ``cm`` PML over the libfabric ``tcp`` provider (``--mca mtl ofi``);
- ``mpi+arrow``: the same, end to end: serialize, exchange the counts (``Alltoall``), ``Alltoallv``,
  read the Arrow streams;
- ``fabric-<provider>``: ``FabricExchange.send`` + ``receive`` of the tables (end to end: histogram,
  window registration, serialization into the send arena, ``fi_write``, zero-copy read).

Throughput per rank = the bytes a rank sends to the other ranks / the slowest rank's time (median of
the repetitions after a warm-up). Rank 0 runs the rendezvous and prints the table and the ratios.

Usage::

    make bench-fabric                                 # = python benchmarks/exchange_fabric.py --setup
    python benchmarks/exchange_fabric.py --ranks 4 --mib 64 --providers tcp,shm
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MPI_ENV = {"FI_TCP_IFACE": "lo"}


# --- setup and launch ------------------------------------------------------------------------------


def setup() -> None:
    """Install Open MPI (apt, as root) and mpi4py (pip, into this interpreter) when missing."""
    if shutil.which("mpirun") is None or shutil.which("mpicc") is None:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            sys.exit("exchange_fabric: needs Open MPI: apt-get install openmpi-bin libopenmpi-dev")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        print("exchange_fabric: installing openmpi-bin libopenmpi-dev with apt-get", flush=True)
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "openmpi-bin", "libopenmpi-dev"], check=True, env=env
        )
    if importlib.util.find_spec("mpi4py") is None:
        print("exchange_fabric: installing mpi4py with pip (builds against Open MPI)", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "mpi4py"], check=True)


def launch(args: argparse.Namespace) -> int:
    if shutil.which("mpirun") is None or importlib.util.find_spec("mpi4py") is None:
        sys.exit("exchange_fabric: mpirun or mpi4py missing; run with --setup (or `make bench-fabric`)")
    cmd = ["mpirun", "-n", str(args.ranks), "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += ["--mca", "pml", "cm", "--mca", "mtl", "ofi", "--mca", "mtl_ofi_provider_include", "tcp"]
    for key, value in MPI_ENV.items():
        cmd += ["-x", f"{key}={value}"]
    cmd += [sys.executable, __file__, "--worker", "--mib", str(args.mib), "--repeat", str(args.repeat)]
    cmd += ["--providers", args.providers] + (["--json", args.json] if args.json else [])
    print("exchange_fabric:", " ".join(cmd), flush=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), **MPI_ENV)
    return subprocess.run(cmd, env=env, check=False).returncode


# --- the measurements (every rank) -----------------------------------------------------------------


def make_parts(rank: int, world: int, nbytes: int) -> dict[int, Any]:
    import pyarrow as pa

    rows = max(nbytes // 16, world)
    rng = np.random.default_rng(1000 + rank)
    keys = rng.integers(0, 1 << 62, rows, dtype=np.int64)
    values = rng.random(rows)
    dest = keys % world
    order = np.argsort(dest, kind="stable")
    keys, values, dest = keys[order], values[order], dest[order]
    bounds = np.searchsorted(dest, np.arange(world + 1))
    return {
        r: pa.table({"key": keys[bounds[r] : bounds[r + 1]], "value": values[bounds[r] : bounds[r + 1]]})
        for r in range(world)
    }


def serialize(parts: dict[int, Any]) -> tuple[np.ndarray, np.ndarray]:
    """All partitions as one buffer of consecutive Arrow IPC streams, and their sizes."""
    from squall.exchange.fabric import ipc_size, write_ipc_into

    sizes = np.array([ipc_size(parts[r]) for r in sorted(parts)], dtype=np.int64)
    buf = np.empty(int(sizes.sum()), dtype=np.uint8)
    offset = 0
    for r, size in zip(sorted(parts), sizes, strict=True):
        write_ipc_into(parts[r], buf[offset : offset + size])
        offset += int(size)
    return buf, sizes


def read_streams(buf: np.ndarray, sizes: np.ndarray) -> int:
    import pyarrow as pa

    whole = pa.py_buffer(buf)
    rows, offset = 0, 0
    for size in sizes:
        rows += pa.ipc.open_stream(whole.slice(offset, int(size))).read_all().num_rows
        offset += int(size)
    return rows


def worker(args: argparse.Namespace) -> None:
    from mpi4py import MPI

    from squall.exchange.base import ExchangeSpec
    from squall.exchange.fabric import FabricExchange, FabricExchangeFactory

    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    parts = make_parts(rank, world, args.mib << 20)
    pre_buf, pre_sizes = serialize(parts)
    remote_bytes = int(pre_sizes.sum() - pre_sizes[rank])
    results: dict[str, list[float]] = {}

    def timed(name: str, fn: Any) -> None:
        times = []
        for rep in range(args.repeat + 1):
            comm.Barrier()
            t0 = time.perf_counter()
            fn(rep)
            elapsed = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            if rep > 0:  # the first repetition warms up (connections, registrations)
                times.append(elapsed)
        results[name] = times

    # memcpy bound: copy the bytes this rank sends
    src = pre_buf[: max(remote_bytes, 1)]
    dst = np.empty_like(src)
    timed("memcpy", lambda rep: np.copyto(dst, src))

    # MPI, transport only
    counts = comm.alltoall([int(s) for s in pre_sizes])
    rbuf = np.empty(sum(counts), dtype=np.uint8)
    sdispl = np.concatenate([[0], np.cumsum(pre_sizes)[:-1]]).astype(np.int64)
    rdispl = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    send_spec = [pre_buf, (pre_sizes.tolist(), sdispl.tolist()), MPI.BYTE]
    recv_spec = [rbuf, (counts, rdispl.tolist()), MPI.BYTE]
    timed("mpi", lambda rep: comm.Alltoallv(send_spec, recv_spec))
    expected_rows = read_streams(rbuf, np.array(counts))

    # MPI, end to end with Arrow
    def mpi_arrow(rep: int) -> None:
        buf, sizes = serialize(parts)
        got = comm.alltoall([int(s) for s in sizes])
        out = np.empty(sum(got), dtype=np.uint8)
        sd = np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()
        rd = np.concatenate([[0], np.cumsum(got)[:-1]]).tolist()
        comm.Alltoallv([buf, (sizes.tolist(), sd), MPI.BYTE], [out, (got, rd), MPI.BYTE])
        assert read_streams(out, np.array(got)) == expected_rows

    timed("mpi+arrow", mpi_arrow)

    # the fabric exchange, one query per provider; rank 0 runs the rendezvous
    for provider in [p for p in args.providers.split(",") if p]:
        factory = FabricExchangeFactory(provider=provider, timeout_s=120) if rank == 0 else None
        config = comm.bcast(factory.prepare(f"bench-{provider}", world) if factory else None, root=0)
        exchange = FabricExchange(config, rank, world)
        everyone = tuple(range(world))

        def fabric(
            rep: int,
            exchange: FabricExchange = exchange,
            query_id: str = config["query_id"],
            everyone=everyone,
        ) -> None:
            spec = ExchangeSpec(query_id, rep + 1, everyone, everyone, "hash")
            exchange.send(spec, parts)
            assert exchange.receive(spec).num_rows == expected_rows

        try:
            timed(f"fabric-{provider}", fabric)
            info = exchange.endpoint.info["provider"]
            eagain = exchange.endpoint.counters()["eagain"]
        finally:
            exchange.close()
            comm.Barrier()
            if factory is not None:
                factory.cleanup(config)
        if rank == 0:
            print(f"  fabric-{provider}: provider {info}, EAGAIN retries on rank 0: {eagain}", flush=True)

    per_rank = comm.gather(remote_bytes, root=0)
    if rank == 0:
        report(args, world, per_rank, results)


def report(
    args: argparse.Namespace, world: int, per_rank: list[int], results: dict[str, list[float]]
) -> None:
    nbytes = min(per_rank)
    print(
        f"\nall-to-all, {world} ranks, {args.mib} MiB of (int64, float64) rows per rank, "
        f"{nbytes / 2**20:.1f} MiB to other ranks (min over ranks); median of {args.repeat} after a warm-up"
    )
    medians = {name: statistics.median(times) for name, times in results.items()}
    rate = {name: nbytes / t / 1e9 for name, t in medians.items()}
    header = (
        f"{'method':<14}{'time ms':>10}{'GB/s/rank':>11}{'vs mpi':>9}{'vs mpi+arrow':>14}{'vs memcpy':>11}"
    )
    print(header)
    print("-" * len(header))
    for name in medians:
        print(
            f"{name:<14}{medians[name] * 1e3:>10.1f}{rate[name]:>11.3f}{rate[name] / rate['mpi']:>9.2f}"
            f"{rate[name] / rate['mpi+arrow']:>14.2f}{rate[name] / rate['memcpy']:>11.4f}"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"world": world, "mib": args.mib, "bytes": nbytes, "seconds": results, "gbps": rate}, indent=1
            )
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2, help="MPI ranks (processes), default 2")
    parser.add_argument("--mib", type=int, default=64, help="MiB of rows per rank, default 64")
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions after one warm-up")
    parser.add_argument("--providers", default="tcp,shm", help="libfabric providers for the fabric exchange")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--setup", action="store_true", help="install Open MPI and mpi4py when missing")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if args.setup:
        setup()
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
