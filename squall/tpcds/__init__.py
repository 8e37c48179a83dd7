"""TPC-DS support: data generation (DuckDB's ``tpcds`` extension in a venv of its own) and the 99 query texts.

The query texts in ``queries/qNN.sql`` are exactly what the extension's ``tpcds_queries()`` returns (DuckDB's
dialect, substitution parameters already filled in), written once with :func:`export_queries` and committed.

DuckDB's extensions ship on PyPI as ``duckdb-extension-NAME`` and load only into the matching ``duckdb``
release, which is not the project's. :func:`generate` therefore runs ``dsdgen`` in a separate venv
(``duckdb==1.5.5`` + ``duckdb-extension-tpcds==1.5.5``), created on first use with ``python -m venv`` and pip
(only PyPI is contacted), and loads the extension from its file with autoinstall/autoload off. The venv lives
in ``build/tpcds-venv`` of a source checkout, else ``~/.cache/squall/tpcds-venv``; ``$SQUALL_TPCDS_VENV``
overrides both.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from functools import cache
from importlib import resources
from pathlib import Path

from squall.errors import DataError, OptionError

__all__ = [
    "DUCKDB_VERSION",
    "QUERY_NUMBERS",
    "TABLES",
    "dataset_files",
    "dataset_sf",
    "export_queries",
    "generate",
    "query",
]

DUCKDB_VERSION = "1.5.5"
"""The ``duckdb`` and ``duckdb-extension-tpcds`` release the generator venv pins (they must match)."""

TABLES: tuple[str, ...] = (
    "call_center",
    "catalog_page",
    "catalog_returns",
    "catalog_sales",
    "customer",
    "customer_address",
    "customer_demographics",
    "date_dim",
    "household_demographics",
    "income_band",
    "inventory",
    "item",
    "promotion",
    "reason",
    "ship_mode",
    "store",
    "store_returns",
    "store_sales",
    "time_dim",
    "warehouse",
    "web_page",
    "web_returns",
    "web_sales",
    "web_site",
)
"""The 24 TPC-DS tables (7 fact tables, 17 dimensions), alphabetically."""

QUERY_NUMBERS: tuple[int, ...] = tuple(range(1, 100))

SF_KEY = b"tpcds_sf"
"""Parquet key-value metadata of every generated file: the scale factor it was generated at."""

_MIN_SF = 0.01  # dsdgen 1.5.5 at SF 0.001 had not finished after 10 minutes


def _check_number(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 99:
        raise OptionError(f"TPC-DS query number must be an integer from 1 to 99, got {n!r}")
    return n


def _check_sf(sf: float) -> float:
    if isinstance(sf, bool) or not isinstance(sf, int | float) or not math.isfinite(sf) or sf < _MIN_SF:
        raise OptionError(f"TPC-DS scale factor must be a number of at least {_MIN_SF:g}, got {sf!r}")
    return float(sf)


@cache
def _text(n: int) -> str:
    return (resources.files(__name__) / "queries" / f"q{n:02d}.sql").read_text(encoding="utf-8")


def query(n: int) -> str:
    """Return the DuckDB SQL text of TPC-DS query ``n`` (1..99), without a trailing semicolon.

    The texts are those of DuckDB's ``tpcds`` extension (``tpcds_queries()``): the TPC-DS templates with the
    qualification substitution parameters, in DuckDB's dialect.
    """
    return _text(_check_number(n)).strip().rstrip(";").rstrip()


# --- datasets ---------------------------------------------------------------------------------------------


def row_group_size(sf: float) -> int:
    """Rows per Parquet row group at scale factor ``sf``.

    DuckDB's default (122,880) from SF 1 up; below, proportionally fewer (a multiple of 2,048, DuckDB's vector
    size), so that the fact tables of a small test dataset still have several row groups to split over workers.
    """
    sf = _check_sf(sf)
    return max(2048, min(122_880, int(122_880 * sf) // 2048 * 2048))


def dataset_files(data: str | Path) -> dict[str, list[Path]]:
    """The Parquet file of each TPC-DS table under ``data`` (``data/<table>.parquet``), in ``TABLES`` order.

    Raises ``DataError`` naming the first table that is missing.
    """
    root = Path(data)
    result: dict[str, list[Path]] = {}
    for table in TABLES:
        path = root / f"{table}.parquet"
        if not path.is_file():
            raise DataError(f"TPC-DS table {table} not found in {root} (no {path.name})")
        result[table] = [path]
    return result


def _file_sf(path: Path) -> float | None:
    """The scale factor recorded in a generated file, None if it has none (not made by :func:`generate`)."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(path).metadata or {}
    except (OSError, ValueError):
        return None
    try:
        return float(meta[SF_KEY])
    except (KeyError, ValueError):
        return None


def dataset_sf(data: str | Path) -> float | None:
    """Scale factor of the complete TPC-DS dataset in ``data``; None if it is incomplete or not ours."""
    try:
        files = dataset_files(data)
    except DataError:
        return None
    found = {_file_sf(paths[0]) for paths in files.values()}
    return found.pop() if len(found) == 1 else None


def _check_target(out: Path, sf: float) -> None:
    """Refuse an ``out`` folder whose TPC-DS tables are of another scale factor or not TPC-DS at all."""
    if out.exists() and not out.is_dir():
        raise OptionError(f"TPC-DS output {out} exists and is not a folder")
    for table in TABLES:
        path = out / f"{table}.parquet"
        if not os.path.lexists(path):
            continue
        other = _file_sf(path)
        if other is None:
            raise DataError(
                f"{out} already holds {path.name}, which is not TPC-DS data from squall gen-tpcds"
            )
        if other != sf:
            raise DataError(
                f"{out} holds TPC-DS SF {other:g}, not SF {sf:g}: remove it or choose another --out"
            )


# --- the generator venv -----------------------------------------------------------------------------------


def venv_dir() -> Path:
    """Where the generator venv lives (see the module doc)."""
    if os.environ.get("SQUALL_TPCDS_VENV"):
        return Path(os.environ["SQUALL_TPCDS_VENV"]).absolute()
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "squall" / "tpcds").is_dir():
        return checkout / "build" / "tpcds-venv"
    return Path.home() / ".cache" / "squall" / "tpcds-venv"


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (other sessions creating the same venv wait)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout or "").strip().splitlines()
        last = lines[-1].strip() if lines else f"exit code {proc.returncode}"
        raise DataError(f"{what} failed: {last}")


def extension_path() -> tuple[Path, Path]:
    """(python, tpcds extension file) of the generator venv, creating the venv first if needed."""
    venv = venv_dir()
    stamp = venv / ".squall-stamp"
    wanted = f"duckdb=={DUCKDB_VERSION} duckdb-extension-tpcds=={DUCKDB_VERSION}\n"
    with _locked(venv.parent / f".{venv.name}.lock"):
        if not (stamp.is_file() and stamp.read_text() == wanted and _venv_python(venv).exists()):
            shutil.rmtree(venv, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(venv)], f"creating the TPC-DS generator venv {venv}")
            _run(
                [str(_venv_python(venv)), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                 *wanted.split()],
                f"pip install {wanted.strip()} into {venv}",
            )  # fmt: skip
            stamp.write_text(wanted)
    python = _venv_python(venv)
    found = subprocess.run(
        [str(python), "-I", "-c", "import duckdb_extension_tpcds as m; print(m.__path__[0])"],
        capture_output=True,
        text=True,
        check=False,
    )
    folder = Path(found.stdout.strip()) / "extensions"
    files = sorted(folder.glob("*/tpcds.duckdb_extension")) if found.returncode == 0 else []
    if not files:
        raise DataError(
            f"tpcds.duckdb_extension not found in the generator venv {venv} (remove it to rebuild)"
        )
    return python, files[0]


def _script() -> str:
    return str(resources.files(__name__) / "_dsdgen.py")


def generate(sf: float, out: str | Path) -> list[Path]:
    """Write TPC-DS at scale factor ``sf`` into ``out`` as ``<table>.parquet`` (24 files); return the files.

    Deterministic: the same ``sf`` gives byte-identical files. Types are DuckDB's for TPC-DS: keys and counts
    BIGINT (a few INTEGER), money DECIMAL(7,2)/(5,2)/(15,2), dates DATE, text VARCHAR. Every file records its
    scale factor in its Parquet metadata (``tpcds_sf``). A folder that already holds the complete dataset at
    this scale factor is left as it is; one holding another scale factor (or other tables under TPC-DS names)
    is refused with ``DataError``. The files are written into a temporary folder beside ``out`` and then moved
    into place (store_sales last), so a half-written dataset never looks complete.

    Raises ``OptionError`` for a bad ``sf`` (DuckDB's dsdgen needs at least 0.01) and ``DataError`` when the
    generator venv cannot be made or generation fails.
    """
    sf = _check_sf(sf)
    out = Path(out).absolute()
    _check_target(out, sf)
    if dataset_sf(out) == sf:
        return [paths[0] for paths in dataset_files(out).values()]
    python, extension = extension_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        cmd = [
            str(python),
            "-I",
            _script(),
            "data",
            str(extension),
            repr(sf),
            str(tmp),
            str(row_group_size(sf)),
        ]
        _run(cmd, f"TPC-DS dsdgen at SF {sf:g}")
        if dataset_sf(tmp) != sf:
            raise DataError(f"TPC-DS dsdgen wrote an incomplete dataset into {tmp}")
        out.mkdir(exist_ok=True)
        last = "store_sales"
        for table in [*(t for t in TABLES if t != last), last]:
            os.replace(tmp / f"{table}.parquet", out / f"{table}.parquet")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [paths[0] for paths in dataset_files(out).values()]


def export_queries(dest: str | Path) -> list[Path]:
    """Write the extension's 99 query texts to ``dest/qNN.sql`` (how ``queries/`` was made); return the files."""
    python, extension = extension_path()
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    _run([str(python), "-I", _script(), "queries", str(extension), str(dest)], "TPC-DS tpcds_queries()")
    return sorted(dest.glob("q*.sql"))
