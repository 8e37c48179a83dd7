"""``--platform fabric``: TPC-H over libfabric's tcp and shm providers with real rank processes,
ranks started by a cluster launcher, and a clear message without libfabric."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import squall
from squall import tpch
from squall.driver.platforms.fabric.worker_process import launcher_rank
from squall.testing import assert_same_result

from .tpch_data import duckdb_over, tpch_dataset


def _native_reason() -> str | None:
    from squall.exchange.fabric import native_available

    return native_available()


needs_fabric = pytest.mark.skipif(_native_reason() is not None, reason=f"libfabric: {_native_reason()}")


@pytest.fixture(scope="module")
def sf01(tmp_path_factory):
    return tpch_dataset(0.1, tmp_path_factory=tmp_path_factory)


@pytest.fixture(scope="module")
def reference(sf01):
    con = duckdb_over(sf01)
    yield con
    con.close()


@pytest.fixture(scope="module", params=["tcp", "shm"])
def fabric(request, sf01):
    if _native_reason() is not None:
        pytest.skip(f"libfabric: {_native_reason()}")
    con = squall.connect(
        data=str(sf01), workers=4, platform="fabric", platform_options={"provider": request.param}
    )
    yield con
    con.close()


@needs_fabric
@pytest.mark.parametrize("n", tpch.QUERY_NUMBERS, ids=lambda n: f"q{n:02d}")
def test_tpch_sf01_over_fabric(fabric, reference, n):
    sql = tpch.query(n, sf=0.1)
    result = fabric.sql(sql)
    assert_same_result(result.to_arrow(), reference.sql(sql).to_arrow_table(), sql)
    assert result.stats["platform"] == "fabric"
    if any(s["output"] in ("hash", "broadcast", "gather") for s in result.stats["stages"]):
        assert result.stats["exchange_requests"].get("write", 0) > 0


@needs_fabric
def test_ranks_started_by_a_cluster_launcher(sf01, reference):
    """Ranks read rank/size from the launcher's environment (here srun's) and connect to the driver."""
    from squall.driver.platforms.fabric.platform import FabricPlatform

    platform = FabricPlatform(2, provider="tcp", launcher="external", listen="127.0.0.1:0")
    host, port = platform.address
    procs = []
    for rank in range(2):
        env = dict(os.environ, SLURM_PROCID=str(rank), SLURM_NTASKS="2", FI_PROVIDER="tcp", FI_TCP_IFACE="lo",
                   SQUALL_WORKER_AUTHKEY=platform.authkey_hex)  # fmt: skip
        cmd = [
            sys.executable,
            "-m",
            "squall.driver.platforms.fabric.worker_process",
            "--connect",
            f"{host}:{port}",
        ]
        procs.append(subprocess.Popen(cmd, env=env))
    con = squall.connect(data=str(sf01), platform=platform)
    try:
        sql = tpch.query(3, sf=0.1)
        assert_same_result(con.sql(sql).to_arrow(), reference.sql(sql).to_arrow_table(), sql)
    finally:
        con.close()
        for p in procs:
            assert p.wait(timeout=30) == 0


def test_launcher_environment():
    assert launcher_rank({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8"}) == (3, 8)
    assert launcher_rank({"SLURM_PROCID": "1", "SLURM_NTASKS": "4"}) == (1, 4)
    assert launcher_rank({"PMI_RANK": "0", "PMI_SIZE": "2"}) == (0, 2)
    with pytest.raises(SystemExit, match="no launcher rank"):
        launcher_rank({})


def test_without_libfabric_the_platform_says_what_is_missing(monkeypatch, tmp_path):
    import squall.exchange.fabric as fabric_module

    monkeypatch.setattr(
        fabric_module, "native_available", lambda: "libfabric.so.1: cannot open shared object file"
    )
    with pytest.raises(squall.OptionError, match=r"the fabric platform needs libfabric: libfabric\.so\.1"):
        squall.connect(data=str(tmp_path), platform="fabric")


@needs_fabric
def test_cli_platform_fabric(sf01, capsys):
    from squall.cli import main

    args = ["query", "SELECT count(*) AS n FROM orders", "--data", str(sf01), "--workers", "2"]
    assert main([*args, "--platform", "fabric", "--provider", "tcp", "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ['"n"', "150000"]
    assert main([*args, "--provider", "tcp"]) == 1
    assert "--provider needs --platform fabric" in capsys.readouterr().err
