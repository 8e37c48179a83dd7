#!/usr/bin/env python
"""Exchange micro-benchmark: the S3 exchange, one- vs two-level, against raw boto3 on one server.

Starts moto's S3 server in a child process on loopback (so it does not share
the GIL with the ranks), then for each W simulates W ranks as threads in this
process, each with its own endpoint and boto3 client, doing one all-to-all hash
exchange of ``--per-rank-kib`` of Arrow data per rank (int64 + float64 columns,
random, so compression barely helps). The raw baseline moves the same bytes
with plain boto3 in the same run: each rank PUTs one object, then GETs another
rank's object whole — the least S3 work that moves every byte through S3 once.

Reported per W and levels: requests summed over ranks (PUTs; GETs split into
index/data/miss; HEADs), the Lambada bound (one level: W PUTs, W² GETs; two
levels: 2W PUTs, 2W·⌈√W⌉ GETs), wall time from a common start barrier to the
last receive, exchange MB/s (payload ÷ time) and the ratio exchange MB/s ÷ raw
MB/s, raw MB/s = payload ÷ (PUT phase + GET phase). W = 1 never touches S3
(a rank keeps what it sends to itself), so its rate is a memory rate.

    python benchmarks/exchange.py            # W = 1, 4, 16, 64; 1 MiB per rank
    python benchmarks/exchange.py --quick    # W = 1, 4; 64 KiB per rank (smoke run)
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from squall.exchange.base import ExchangeSpec, open_exchange
from squall.exchange.s3 import S3ExchangeFactory, make_client

BUCKET = "squall-bench"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """moto's S3 server in a child process on a free loopback port; yields its endpoint URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@dataclass
class Row:
    """One measured exchange (or raw baseline) configuration."""

    workers: int
    levels: int
    put: int = 0
    get_index: int = 0
    get_data: int = 0
    get_miss: int = 0
    head: int = 0
    list: int = 0
    seconds: float = 0.0
    payload: int = 0

    @property
    def get(self) -> int:
        return self.get_index + self.get_data + self.get_miss

    @property
    def mb_s(self) -> float:
        return self.payload / 1e6 / self.seconds if self.seconds else float("inf")


def _parts(rank: int, world: int, per_rank: int) -> dict[int, pa.Table]:
    rows = max(1, per_rank // 16 // world)
    rng = np.random.default_rng(rank)
    return {
        r: pa.table({"id": np.arange(rows, dtype=np.int64) + rank * rows, "x": rng.random(rows)})
        for r in range(world)
    }


def _run_threads(world: int, body: Any) -> list[tuple[float, ...]]:
    """Run ``body(rank, barrier)`` on ``world`` threads; each returns its timestamps."""
    barrier = threading.Barrier(world)
    with ThreadPoolExecutor(world) as pool:
        return list(pool.map(lambda r: body(r, barrier), range(world)))


def bench_exchange(endpoint: str, world: int, levels: int, per_rank: int, args: argparse.Namespace) -> Row:
    factory = S3ExchangeFactory(
        f"s3://{BUCKET}/bench",
        levels=levels,
        endpoint_url=endpoint,
        threads=args.threads,
        max_pool_connections=2 * args.threads,
        compression=args.compression,
        timeout_s=300,
    )
    config = factory.prepare(f"b{uuid.uuid4().hex[:10]}", world)
    data = [_parts(r, world, per_rank) for r in range(world)]
    stats: list[dict[str, Any]] = [{}] * world
    spec = ExchangeSpec(config["query_id"], 1, tuple(range(world)), tuple(range(world)))

    def rank(r: int, barrier: threading.Barrier) -> tuple[float, float]:
        exchange = open_exchange(config, r, world)
        exchange.client  # noqa: B018 - create the client before the clock starts
        barrier.wait()
        t0 = time.perf_counter()
        exchange.send(spec, data[r])
        exchange.receive(spec)
        t1 = time.perf_counter()
        stats[r] = exchange.stats().per_exchange[0]
        exchange.close()
        return t0, t1

    try:
        times = _run_threads(world, rank)
    finally:
        factory.cleanup(config)
    row = Row(world, levels, seconds=max(t for _, t in times) - min(t for t, _ in times))
    row.payload = sum(t.nbytes for parts in data for t in parts.values())
    for name in ("put", "get_index", "get_data", "get_miss", "head", "list"):
        setattr(row, name, sum(s[name] for s in stats))
    return row


def bench_raw(endpoint: str, world: int, per_rank: int) -> tuple[float, float]:
    """Seconds for the PUT phase and the GET phase of the raw baseline."""
    blob = np.random.default_rng(0).bytes(per_rank)
    prefix = f"raw/{uuid.uuid4().hex[:10]}"

    def rank(r: int, barrier: threading.Barrier) -> tuple[float, ...]:
        client = make_client({"endpoint_url": endpoint, "max_pool_connections": 2})
        barrier.wait()
        t0 = time.perf_counter()
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{r}", Body=blob)
        t1 = time.perf_counter()
        barrier.wait()
        t2 = time.perf_counter()
        body = client.get_object(Bucket=BUCKET, Key=f"{prefix}/{(r + 1) % world}")["Body"].read()
        t3 = time.perf_counter()
        assert len(body) == per_rank
        return t0, t1, t2, t3

    times = _run_threads(world, rank)
    client = make_client({"endpoint_url": endpoint})
    client.delete_objects(
        Bucket=BUCKET, Delete={"Objects": [{"Key": f"{prefix}/{r}"} for r in range(world)], "Quiet": True}
    )
    put_s = max(t[1] for t in times) - min(t[0] for t in times)
    get_s = max(t[3] for t in times) - min(t[2] for t in times)
    return put_s, get_s


def bound(world: int, levels: int) -> str:
    g = math.isqrt(world - 1) + 1 if world > 1 else 1
    return f"{world}/{world * world}" if levels == 1 else f"{2 * world}/{2 * world * g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: W = 1, 4 and 64 KiB per rank")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--per-rank-kib", type=int, default=1024, help="Arrow bytes each rank sends")
    parser.add_argument("--threads", type=int, default=4, help="fetch threads per endpoint")
    parser.add_argument("--compression", default="zstd", choices=["zstd", "lz4", "none"])
    args = parser.parse_args(argv)
    if args.quick:
        args.workers, args.per_rank_kib = [1, 4], 64
    per_rank = args.per_rank_kib * 1024
    os.environ.update(CREDENTIALS)
    with moto_server() as endpoint:
        make_client({"endpoint_url": endpoint}).create_bucket(Bucket=BUCKET)
        print(f"moto S3 at {endpoint}; {args.per_rank_kib} KiB per rank; {args.threads} threads per endpoint")
        header = (
            f"{'W':>3} {'levels':>7} {'PUT':>5} {'GET':>6} {'(idx+data+miss)':>17} {'LIST':>5} {'HEAD':>5} "
            f"{'bound PUT/GET':>14} {'time s':>7} {'MB/s':>8} {'raw MB/s':>9} {'ratio':>6}"
        )
        print(header)
        print("-" * len(header))
        for world in args.workers:
            put_s, get_s = bench_raw(endpoint, world, per_rank)
            raw = world * per_rank / 1e6 / (put_s + get_s)
            for levels in (1, 2):
                row = bench_exchange(endpoint, world, levels, per_rank, args)
                split = f"({row.get_index}+{row.get_data}+{row.get_miss})"
                print(
                    f"{world:>3} {f'{levels}-level':>7} {row.put:>5} {row.get:>6} {split:>17} {row.list:>5} {row.head:>5} "
                    f"{bound(world, levels):>14} {row.seconds:>7.3f} {row.mb_s:>8.1f} {raw:>9.1f} "
                    f"{row.mb_s / raw:>6.2f}"
                )
            print(
                f"{'':>3} raw boto3: {world} PUTs {world * per_rank / 1e6 / put_s:.1f} MB/s, "
                f"{world} GETs {world * per_rank / 1e6 / get_s:.1f} MB/s, PUT+GET {raw:.1f} MB/s"
            )
    print("ratio = exchange MB/s / raw boto3 PUT+GET MB/s (same bytes, same server, same run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
