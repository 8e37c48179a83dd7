"""Binding-level checks of the libfabric core (``rdma-backend/``) behind ``squall.exchange.fabric``.

Everything that touches libfabric runs in spawned processes with the provider's
environment set before libfabric initialises (``FI_PROVIDER``, ``FI_TCP_IFACE``
are read once per process). The missing-library test needs no libfabric.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from squall.exchange.fabric import native_available

PROVIDERS = {
    "tcp": {"FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo"},
    "shm": {"FI_PROVIDER": "shm"},
}

needs_native = pytest.mark.skipif(native_available() is not None, reason=str(native_available()))


def _child(fn: Callable[..., Any], env: dict[str, str], args: tuple, queue: Any) -> None:  # pragma: no cover
    os.environ.update(env)
    try:
        queue.put(("ok", fn(*args)))
    except BaseException as exc:
        queue.put(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def _run(
    jobs: list[tuple[Callable[..., Any], tuple]], env: dict[str, str], timeout_s: float = 90
) -> list[Any]:
    """Run each ``fn(*args)`` in its own spawned process; their results in order."""
    ctx = mp.get_context("spawn")
    queues = [ctx.Queue() for _ in jobs]
    procs = [
        ctx.Process(target=_child, args=(fn, env, args, q))
        for (fn, args), q in zip(jobs, queues, strict=True)
    ]
    for p in procs:
        p.start()
    try:
        results = []
        for q in queues:
            status, payload = q.get(timeout=timeout_s)
            if status != "ok":
                raise AssertionError(payload)
            results.append(payload)
        return results
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


# --- the missing-library path ---------------------------------------------------------------------


def test_missing_native_module_gives_clear_error():
    """Without the native module the package imports; using it says what to install."""
    code = """
import sys
sys.modules["squall_fabric._native"] = None  # as if `make native` never ran
import squall.exchange.fabric as fabric
from squall.exchange.base import ExchangeError, exchange_factory, open_exchange
reason = fabric.native_available()
assert reason is not None
for attempt in (
    lambda: exchange_factory("fabric").prepare("q1", 2),
    lambda: open_exchange({"name": "fabric", "rendezvous": "127.0.0.1:1"}, 0, 2),
    lambda: fabric.Endpoint("tcp"),
):
    try:
        attempt()
    except ExchangeError as exc:
        print(type(exc).__name__, exc)
    else:
        raise SystemExit("no error")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 3
    for line in lines:
        assert line.startswith("FabricUnavailable fabric exchange unavailable:")
        assert "squall_fabric._native" in line and "make native" in line and "libfabric-dev" in line


# --- endpoint and memory registration -------------------------------------------------------------


def _endpoint_and_mrs(provider: str) -> dict[str, Any]:
    import pyarrow as pa

    from squall.exchange.fabric import Endpoint, FabricError

    ep = Endpoint(provider)
    info = dict(ep.info)
    window = np.zeros(1 << 20, dtype=np.uint8)
    win = ep.register(window, remote_write=True)
    src = ep.register(pa.py_buffer(b"x" * 4096))  # read-only Arrow buffer as a write source
    second = ep.register(np.ones(8192, dtype=np.int64), remote_write=True)
    out = {
        "info": info,
        "name": ep.name(),
        "win_key": win.key,
        "second_key": second.key,
        "win_base": win.remote_base,
        "win_address": win.address,
        "src_length": src.length,
        "second_length": second.length,
    }
    win.close()
    win.close()  # idempotent
    src.close()
    # second stays registered: close() must release it (no leak, no EBUSY)
    ep.close()
    ep.close()
    try:
        ep.name()
    except FabricError as exc:
        out["after_close"] = str(exc)
    return out


@needs_native
@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_endpoint_info_and_memory_registration(provider):
    (out,) = _run([(_endpoint_and_mrs, (provider,))], PROVIDERS[provider])
    info = out["info"]
    assert provider in info["provider"]
    assert info["max_msg_size"] > 0 and info["tx_size"] > 0 and info["chunk_size"] > 0
    assert len(out["name"]) > 0
    assert out["win_key"] != out["second_key"]  # provider or requested keys, unique per domain
    # remote addresses: virtual with FI_MR_VIRT_ADDR, offsets (base 0) otherwise
    assert out["win_base"] == (out["win_address"] if info["virt_addr"] else 0)
    assert out["src_length"] == 4096 and out["second_length"] == 8192 * 8
    assert "closed" in out["after_close"]


def _open_beside_stale_regions(dead_pid: int) -> dict[str, Any]:
    from squall.exchange.fabric import Endpoint

    shm = Path("/dev/shm")
    # what a SIGKILLed process whose pid this one reuses left under libfabric's default name
    stale_default = shm / f"{os.getpid()}:0:0"
    stale_default.write_bytes(b"\0" * 4096)
    dead = shm / f"sqf-{dead_pid}-0-0"  # a region of ours whose process is gone
    dead.write_bytes(b"\0" * 4096)
    try:
        ep = Endpoint("shm")
        name = ep.name()
        own = sorted(p.name for p in shm.glob(f"sqf-{os.getpid()}-*"))
        dead_left = dead.exists()
        ep.close()
        own_after_close = sorted(p.name for p in shm.glob(f"sqf-{os.getpid()}-*"))
    finally:
        stale_default.unlink(missing_ok=True)
        dead.unlink(missing_ok=True)
    return {"name": name, "own": own, "dead_left": dead_left, "own_after_close": own_after_close}


@needs_native
@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")
def test_shm_endpoint_opens_beside_a_dead_process_region():
    """A reused pid whose old region is still in /dev/shm does not stop (or crash) a new endpoint.

    CI saw this: libfabric's default region name is ``<pid>:0:0``; once a SIGKILLed rank's pid was
    reused, fi_enable failed and closing the half-open endpoint crashed the process.
    """
    probe = subprocess.Popen([sys.executable, "-c", "pass"])
    probe.wait()  # a pid that has just exited
    (out,) = _run([(_open_beside_stale_regions, (probe.pid,))], PROVIDERS["shm"])
    assert len(out["own"]) == 1 and out["own"][0].startswith("sqf-")
    assert out["own"][0].encode() in out["name"]  # the peers' address is the region's name
    assert not out["dead_left"]  # swept before opening
    assert out["own_after_close"] == []


# --- the C core alone, under AddressSanitizer (leaks on close fail the run) ------------------------

RDMA_BACKEND = Path(__file__).resolve().parent.parent / "rdma-backend"


def _asan_selftest(tmp_path: Path) -> Path:
    if shutil.which("gcc") is None or shutil.which("pkg-config") is None:
        pytest.skip("gcc or pkg-config missing")
    cflags = subprocess.run(["pkg-config", "--cflags", "--libs", "libfabric"], capture_output=True, text=True)
    if cflags.returncode != 0:
        pytest.skip("libfabric development files missing")
    exe = tmp_path / "selftest"
    cmd = ["gcc", "-g", "-O1", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter"]
    cmd += ["-fsanitize=address", "-fno-omit-frame-pointer", f"-I{RDMA_BACKEND}"]
    cmd += [str(RDMA_BACKEND / "squall_fabric.c"), str(RDMA_BACKEND / "selftest.c"), "-o", str(exe)]
    cmd += cflags.stdout.split()
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return exe


@needs_native
@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_native_core_under_address_sanitizer(provider, tmp_path):
    """Write + message to itself, 3 rounds (one with -FI_EAGAIN, one closing with MRs left): no leak."""
    exe = _asan_selftest(tmp_path)
    env = dict(os.environ, **PROVIDERS[provider], ASAN_OPTIONS="detect_leaks=1")
    out = subprocess.run([str(exe), provider], capture_output=True, text=True, env=env, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 3 and all(" ok " in line and "pending=0" in line for line in lines), out.stdout
    assert "eagain=0" not in lines[1]  # the 4 KiB-chunk round filled the transmit queue


# --- a write between two processes ----------------------------------------------------------------


def _target(pipe: Any, provider: str, size: int, messages: int) -> dict[str, Any]:
    from squall.exchange.fabric import EV_RECV, Endpoint

    with Endpoint(provider) as ep:
        window = np.zeros(size + 128, dtype=np.uint8)
        mr = ep.register(window, remote_write=True)
        pipe.send((ep.name(), mr.remote_base + 64, mr.key))
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < messages and time.monotonic() < deadline:
            got += [e.data for e in ep.poll(5) if e.kind == EV_RECV]
        checksum = int(window[64 : 64 + size].astype(np.uint64).sum())
        untouched = bool(window[:64].max() == 0 and window[64 + size :].max() == 0)
        pipe.send("bye")  # the initiator's last send is delivered: both may close
        return {"messages": got, "checksum": checksum, "untouched": untouched}


def _initiator(pipe: Any, provider: str, size: int, writes: int, chunk: int) -> dict[str, Any]:
    from squall.exchange.fabric import EV_SEND, EV_WRITE, Endpoint

    with Endpoint(provider) as ep:
        name, addr, key = pipe.recv()
        dest = ep.insert(name)
        data = np.random.default_rng(7).integers(0, 256, size, dtype=np.uint8)
        mr = ep.register(data)
        if chunk:
            ep.set_chunk_size(chunk)
        bounds = np.linspace(0, size, writes + 1).astype(int)
        for i in range(writes):  # every write posted before any completion is awaited
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            ep.write(mr, lo, hi - lo, dest, addr + lo, key, tag=100 + i)
        outstanding = ep.pending
        events = []
        deadline = time.monotonic() + 60
        while len(events) < writes and time.monotonic() < deadline:
            events += [e for e in ep.poll(5) if e.kind == EV_WRITE]
        # only now, with every write complete at the target, tell it (no FI_RMA_EVENT needed)
        ep.send(dest, b"written:%d" % size, tag=1)
        sent = []
        while not sent and time.monotonic() < deadline:
            sent = [e for e in ep.poll(5) if e.kind == EV_SEND]
        pipe.recv()
        return {
            "events": sorted((e.tag, e.err, e.length) for e in events),
            "sent": [(e.tag, e.err) for e in sent],
            "checksum": int(data.astype(np.uint64).sum()),
            "outstanding": outstanding,
            "counters": ep.counters(),
        }


def _pair(provider: str, size: int, writes: int, chunk: int) -> tuple[dict[str, Any], dict[str, Any]]:
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    target, initiator = _run(
        [(_target, (a, provider, size, 1)), (_initiator, (b, provider, size, writes, chunk))],
        PROVIDERS[provider],
    )
    return target, initiator


@needs_native
@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_write_between_two_processes(provider):
    size = 3 * 1024 * 1024 + 13  # not a multiple of anything
    target, initiator = _pair(provider, size, writes=1, chunk=0)
    assert initiator["events"] == [(100, 0, size)]
    assert initiator["sent"] == [(1, 0)]
    assert target["messages"] == [b"written:%d" % size]
    assert target["checksum"] == initiator["checksum"]
    assert target["untouched"]
    assert initiator["counters"]["pending"] == 0


@needs_native
@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_eagain_under_many_outstanding_writes(provider):
    """4 KiB chunks: 16 writes of 1 MiB are 4096 fi_writes, past the transmit queue (EAGAIN + progress)."""
    size = 16 << 20
    target, initiator = _pair(provider, size, writes=16, chunk=4096)
    assert [tag for tag, _, _ in initiator["events"]] == list(range(100, 116))  # one event per write
    assert all(err == 0 for _, err, _ in initiator["events"])
    assert sum(length for _, _, length in initiator["events"]) == size
    assert initiator["counters"]["eagain"] > 0
    assert target["checksum"] == initiator["checksum"] and target["untouched"]


# --- exchange-level: a retried worker in a new process ---------------------------------------------


def _rank(config: dict[str, Any], rank: int, world: int, query_id: str, receive: bool) -> int | None:
    import pyarrow as pa

    from squall.exchange.base import ExchangeSpec, open_exchange

    exchange = open_exchange(config, rank, world)
    try:
        spec = ExchangeSpec(query_id, 1, tuple(range(world)), (0,), "gather")
        exchange.send(spec, {0: pa.table({"rank": [rank] * 3})})
        if receive:
            return exchange.receive(spec).num_rows
        return exchange.stats().requests.get("duplicate_send", 0)
    finally:
        exchange.close()


@needs_native
def test_retried_worker_in_new_process_is_harmless():
    from squall.exchange.fabric import FabricExchangeFactory

    env = PROVIDERS["tcp"]
    factory = FabricExchangeFactory(provider="tcp", timeout_s=30, env=env)
    query_id = f"q{uuid.uuid4().hex[:8]}"
    config = factory.prepare(query_id, 2)
    try:
        first = _run([(_rank, (config, 0, 2, query_id, True)), (_rank, (config, 1, 2, query_id, False))], env)
        assert first == [6, 0]
        (retry,) = _run([(_rank, (config, 1, 2, query_id, False))], env)  # rank 1 started again
        assert retry == 1  # it saw its finished send and skipped it
    finally:
        factory.cleanup(config)
        factory.close()


@needs_native
def test_abort_stops_a_waiting_receiver():
    import threading

    from squall.exchange.fabric import FabricExchangeFactory

    env = PROVIDERS["tcp"]
    factory = FabricExchangeFactory(provider="tcp", timeout_s=60, env=env)
    query_id = f"q{uuid.uuid4().hex[:8]}"
    config = factory.prepare(query_id, 2)
    timer = threading.Timer(3.0, factory.abort, args=(config, "rank 1 failed: disk full"))
    timer.start()
    try:
        # the event, not a duration: the receiver stopped by the abort, with its reason, not by its 60 s timeout
        with pytest.raises(AssertionError, match=r"ExchangeAborted: rank 1 failed: disk full"):
            _run([(_rank, (config, 0, 2, query_id, True))], env)  # rank 1 never comes
    finally:
        timer.cancel()
        factory.cleanup(config)
        factory.close()
