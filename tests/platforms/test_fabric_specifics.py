"""What only the fabric platform does, beyond the platform suite's ``fabric-tcp``/``fabric-shm`` backends:
ranks started by a cluster launcher (mpirun/srun) that connect back to the driver, the launcher's
environment, the CLI's ``--provider``, and a clear message when libfabric is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import squall
from squall import tpch
from squall.testing import assert_same_result

from ..tpch_data import duckdb_over
from .backends import SF, backend_named

BACKEND = backend_named("fabric-tcp")
needs_fabric = pytest.mark.skipif(BACKEND.skip() is not None, reason=str(BACKEND.skip()))
#: the rank program a cluster launcher starts (``srun -n W python -m … --connect HEAD:PORT``)
RANK_PROGRAM = "squall.driver.platforms.fabric.worker_process"


@needs_fabric
def test_ranks_started_by_a_cluster_launcher(sf01):
    """Ranks read rank/size from the launcher's environment (here srun's) and connect to the driver."""
    options = {"provider": "tcp", "launcher": "external", "listen": "127.0.0.1:0"}
    con = squall.connect(data=str(sf01), workers=2, platform="fabric", platform_options=options)
    host, port = con.platform.address
    procs = []
    for rank in range(2):
        env = dict(os.environ, SLURM_PROCID=str(rank), SLURM_NTASKS="2", FI_PROVIDER="tcp", FI_TCP_IFACE="lo",
                   SQUALL_WORKER_AUTHKEY=con.platform.authkey_hex)  # fmt: skip
        procs.append(
            subprocess.Popen([sys.executable, "-m", RANK_PROGRAM, "--connect", f"{host}:{port}"], env=env)
        )
    reference = duckdb_over(sf01)
    try:
        sql = tpch.query(3, sf=SF)
        assert_same_result(con.sql(sql).to_arrow(), reference.sql(sql).to_arrow_table(), sql)
    finally:
        con.close()
        reference.close()
        for p in procs:
            assert p.wait(timeout=30) == 0


def test_launcher_environment():
    import importlib

    launcher_rank = importlib.import_module(RANK_PROGRAM).launcher_rank
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


@needs_fabric
@pytest.mark.parametrize("schedule", ["open-shop", "auto"])
def test_communication_schedule_on_tpch(sf01, schedule):
    """Neo-Join's open-shop schedule on a whole query (every exchange above 0 bytes), or the default on one
    machine (rotated, saying why); the answer is DuckDB's and each exchange's stats name its schedule."""
    from squall.driver.report.exchanges import format_exchanges

    options = {"schedule": schedule, "schedule_min_bytes": 0, "schedule_quantum": 4096}
    reference = duckdb_over(sf01)
    try:
        with squall.connect(
            data=str(sf01),
            workers=3,
            platform="fabric",
            platform_options={"provider": "tcp"},
            exchange_options=options,
        ) as con:
            for n in (9, 13, 21):
                sql = tpch.query(n, sf=SF)
                result = con.sql(sql)
                assert_same_result(result.to_arrow(), reference.sql(sql).to_arrow_table(), sql)
                exchanges = result.stats["exchanges"]
                assert exchanges
                for e in exchanges:
                    if schedule == "open-shop":
                        assert e["schedule"].startswith("open-shop: ") and e["schedule_phases"] >= 1, e
                    else:
                        assert e["schedule"].startswith("rotated: every rank on this machine"), e
                assert "; schedule " in format_exchanges(result.stats)
    finally:
        reference.close()
