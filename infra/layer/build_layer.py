#!/usr/bin/env python3
"""Build Squall's Lambda dependency layer without Docker.

The layer holds the third-party runtime dependencies of the ``squall`` package
for the ``python3.12`` Lambda runtime (Amazon Linux 2023, glibc 2.34)::

    python build_layer.py --arch arm64      # or x86_64; `make layer ARCH=...`

Steps:

1. ``pip download`` manylinux_2_28 wheels for CPython 3.12 and the target
   architecture (``--only-binary=:all:``, so nothing is compiled here). The
   requirements are the project's ``dependencies`` plus its ``aws`` extra read
   from ``pyproject.toml``, minus what Lambda does not need (see
   :data:`EXCLUDED_REQUIREMENTS`), plus ``aws-xray-sdk`` for the Powertools
   tracer.
2. Drop the wheels the runtime already provides (boto3 and its closure,
   :data:`RUNTIME_PROVIDED`) and unzip the rest into
   ``build/layer-<arch>/python/``.
3. Trim files Lambda never uses (:data:`TRIM_RULES`); each rule says why it is
   safe.
4. Verify: every ELF file is for the target machine, every extension module is
   tagged for CPython 3.12, every ``DT_NEEDED`` library is either in the layer or
   one the manylinux policy lets a wheel take from the OS, and no file mentions
   another CPython version. When a CPython 3.12 for the host's architecture
   exists, import the layer with it and run a smoke test (Parquet, IPC, compute,
   filesystems, DuckDB, sqlglot, Powertools).
5. Fail if the unzipped size is over Lambda's limit minus a reserve for the
   function code, print the size, write ``build/layer-<arch>.zip``.

Known limit: pip evaluates environment markers such as ``platform_machine``
for the host, not the target; none of the current requirements uses one.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: Lambda architecture name -> wheel platform tag (pip also accepts older manylinux tags).
PLATFORMS = {"arm64": "manylinux_2_28_aarch64", "x86_64": "manylinux_2_28_x86_64"}
#: Newest glibc the wheels may need; the python3.12 runtime (AL2023) has 2.34, we stay at 2.28 as planned.
MAX_GLIBC_MINOR = 28
#: Lambda architecture name -> ELF ``e_machine``.
ELF_MACHINES = {"arm64": 183, "x86_64": 62}
#: Lambda architecture name -> the machine part of CPython's extension suffix.
EXT_MACHINES = {"arm64": "aarch64", "x86_64": "x86_64"}
PYTHON_VERSION = "3.12"

#: Lambda's limit on the unzipped size of the function code plus all its layers.
LAMBDA_UNZIPPED_LIMIT = 262_144_000
#: Kept free for the function code asset (the ``squall`` package, well under 5 MB) and future growth.
DEFAULT_RESERVE_BYTES = 16 * 1024 * 1024

#: Project requirements not shipped in the layer.
EXCLUDED_REQUIREMENTS = {
    "boto3": "provided by the python3.12 Lambda runtime",
    "tpchgen-cli": "TPC-H data generator binary; only used on developer machines",
}
#: Project requirements shipped without their extras.
PLAIN_REQUIREMENTS = {
    "sqlglot": "the [c] extra (sqlglotc, compiled sqlglot: planning ~1.5x faster) is ~60 MB, over the size budget",
}
#: Requirements added for Lambda only.
EXTRA_REQUIREMENTS = ["aws-xray-sdk>=2.12"]  # Powertools Tracer backend, used when tracing is on
#: Distributions the runtime already has (boto3's closure); shipping a second copy only wastes space
#: and can shadow the runtime's matching botocore/urllib3 pair.
RUNTIME_PROVIDED = {"boto3", "botocore", "s3transfer", "jmespath", "python-dateutil", "six", "urllib3"}

#: Libraries a manylinux wheel may take from the OS (auditwheel's policy) and that Lambda's AL2023 has.
SYSTEM_LIBRARIES = {
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libpthread.so.0",
    "libutil.so.1",
    "libnsl.so.1",
    "libresolv.so.2",
    "libcrypt.so.1",
    "libgcc_s.so.1",
    "libstdc++.so.6",
    "libz.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
}


@dataclass(frozen=True)
class TrimRule:
    """Glob patterns (relative to ``python/``, ``/``-separated) removed from the layer, and why."""

    patterns: tuple[str, ...]
    reason: str


TRIM_RULES: tuple[TrimRule, ...] = (
    TrimRule(
        ("**/__pycache__", "**/*.pyc"), "stray bytecode (wheels ship none; Python rebuilds it in memory)"
    ),
    TrimRule(
        (
            "pyarrow/_flight.*.so",
            "pyarrow/flight.py",
            "pyarrow/libarrow_flight.so*",
            "pyarrow/libarrow_python_flight.so*",
        ),
        "Arrow Flight RPC (gRPC) is never used by Squall; nothing else links it",
    ),
    TrimRule(
        (
            "pyarrow/include",
            "pyarrow/src",
            "pyarrow/includes",
            "pyarrow/*.pyx",
            "pyarrow/*.pxd",
            "pyarrow/*.pxi",
        ),
        "C++ headers and Cython sources, only needed to build extensions against pyarrow",
    ),
    TrimRule(
        ("pyarrow/tests", "pyarrow/_pyarrow_cpp_tests.*.so", "pyarrow/conftest.py"),
        "pyarrow's own test suite",
    ),
    TrimRule(
        ("numpy/_core/include", "numpy/_core/lib", "numpy/*/include"), "numpy C headers and static libs"
    ),
    TrimRule(("numpy/tests", "numpy/*/tests", "numpy/*/*/tests"), "numpy's own test suite"),
    TrimRule(("_duckdb-stubs",), "type stubs"),
)


# --------------------------------------------------------------------------------------------- requirements


def canonical(name: str) -> str:
    """PEP 503 normalized distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(spec: str) -> str:
    """Distribution name of a PEP 508 requirement string (``"a-b[x]>=1; marker"`` -> ``"a-b"``)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    if not match:
        raise ValueError(f"not a requirement: {spec!r}")
    return canonical(match.group(1))


def layer_requirements(pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    """The requirement strings the layer is built from (project deps + ``aws`` extra, filtered)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    specs = list(project["dependencies"]) + list(project.get("optional-dependencies", {}).get("aws", []))
    specs += EXTRA_REQUIREMENTS
    excluded = {canonical(n) for n in EXCLUDED_REQUIREMENTS}
    plain = {canonical(n) for n in PLAIN_REQUIREMENTS}
    return [
        re.sub(r"\[[^]]*\]", "", s, count=1) if requirement_name(s) in plain else s
        for s in specs
        if requirement_name(s) not in excluded
    ]


def wheel_distribution(wheel: Path) -> str:
    """Normalized distribution name of a wheel file name."""
    return canonical(wheel.name.split("-", 1)[0])


# --------------------------------------------------------------------------------------------- download/unpack


def platform_tags(arch: str) -> list[str]:
    """``--platform`` values for ``arch``: manylinux_2_28 and every older manylinux tag.

    pip does not expand ``manylinux_2_28_*`` to older compatible tags by itself (it only does for
    ``manylinux2014``/``2010``), and many wheels (pydantic-core, numpy) are tagged ``manylinux_2_17``.
    """
    machine = EXT_MACHINES[arch]
    oldest = 17 if arch == "arm64" else 5
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(MAX_GLIBC_MINOR, oldest - 1, -1)]
    tags.append(f"manylinux2014_{machine}")
    if arch == "x86_64":
        tags += ["manylinux2010_x86_64", "manylinux1_x86_64"]
    return tags


def download(requirements: Sequence[str], arch: str, dest: Path) -> list[Path]:
    """``pip download`` binary wheels for CPython 3.12 on ``arch`` into ``dest``; return the wheel paths."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):
        old.unlink()
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "--quiet",
        "--dest",
        str(dest),
        *(arg for tag in platform_tags(arch) for arg in ("--platform", tag)),
        "--only-binary=:all:",
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        *requirements,
    ]
    subprocess.run(cmd, check=True)
    return sorted(dest.glob("*.whl"))


def unpack_wheel(wheel: Path, target: Path) -> None:
    """Install a wheel by unzipping it into ``target`` (what ``pip install --target`` does, minus scripts).

    ``<name>.data/purelib`` and ``platlib`` are merged into ``target``; ``scripts``, ``headers`` and
    ``data`` are dropped. File modes stored in the wheel are kept.
    """
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            parts = info.filename.split("/")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                parts = parts[2:]
            out = target.joinpath(*parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            mode = (info.external_attr >> 16) & 0o777
            out.chmod(mode | 0o644 if mode else 0o644)


# --------------------------------------------------------------------------------------------- trimming


def _matches(rel: str, pattern: str) -> bool:
    if pattern.startswith("**/"):
        return fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], pattern[3:])
    return rel.count("/") == pattern.count("/") and fnmatch.fnmatchcase(rel, pattern)


def duplicate_sonames(root: Path) -> list[Path]:
    """Byte-identical copies of a shared library next to its SONAME file.

    Wheels cannot hold symlinks, so pyarrow ships ``libarrow_python.so``, ``.so.2600`` and
    ``.so.2600.1.0`` as three full copies. Everything links the SONAME (``lib*.so.<major>``); the
    unversioned and fully versioned names are only for linking new code, so they are removed when the
    SONAME file exists and has the same size.
    """
    dupes: list[Path] = []
    for path in sorted(root.rglob("lib*.so*")):
        m = re.fullmatch(r"(lib.+\.so)((?:\.\d+){2,})?", path.name)
        if not m or not path.is_file():
            continue
        base, version = m.group(1), m.group(2)
        if version is None:
            candidates = sorted(path.parent.glob(base + ".[0-9]*"))
            soname = next((c for c in candidates if re.fullmatch(re.escape(base) + r"\.\d+", c.name)), None)
        else:
            soname = path.parent / f"{base}.{version.split('.')[1]}"
        if soname is not None and soname.is_file() and soname.stat().st_size == path.stat().st_size:
            dupes.append(path)
    return dupes


def trim(root: Path, rules: Iterable[TrimRule] = TRIM_RULES) -> dict[str, int]:
    """Apply the trim rules and duplicate-library removal under ``root``; return bytes freed per reason."""
    freed: dict[str, int] = {}
    for rule in rules:
        victims: list[Path] = []
        for path in root.rglob("*"):
            rel = path.relative_to(root).as_posix()
            if any(_matches(rel, p) for p in rule.patterns):
                victims.append(path)
        for path in sorted(victims, key=lambda p: len(p.parts)):
            if path.exists():
                freed[rule.reason] = freed.get(rule.reason, 0) + _remove(path)
    dup_reason = "duplicate copies of versioned shared libraries (the SONAME copy stays)"
    for path in duplicate_sonames(root):
        freed[dup_reason] = freed.get(dup_reason, 0) + _remove(path)
    return freed


def find_strip(arch: str) -> list[str] | None:
    """A ``strip`` command that understands ``arch``'s ELF files, if this machine has one.

    ``llvm-strip`` handles every target; GNU ``strip`` only its own unless it is the cross one.
    """
    for name in ("llvm-strip", *(f"llvm-strip-{v}" for v in range(30, 13, -1))):
        if tool := shutil.which(name):
            return [tool, "--strip-unneeded"]
    cross = {"arm64": "aarch64-linux-gnu-strip", "x86_64": "x86_64-linux-gnu-strip"}[arch]
    if tool := shutil.which(cross):
        return [tool, "--strip-unneeded"]
    if host_arch() == arch and (tool := shutil.which("strip")):
        return [tool, "--strip-unneeded"]
    return None


def strip_symbols(root: Path, arch: str) -> int | None:
    """Drop static symbol tables (``.symtab``) from every shared object; return bytes freed.

    Wheels ship most libraries unstripped (pyarrow, numpy: ~27 MB of symbols). The dynamic symbol
    table that the loader and Python use (``.dynsym``) is kept by ``--strip-unneeded``. Returns
    ``None`` when no strip tool for ``arch`` exists.
    """
    cmd = find_strip(arch)
    if cmd is None:
        return None
    before = tree_size(root)
    files = [str(p) for p in _elf_files(root)]
    for i in range(0, len(files), 64):
        subprocess.run([*cmd, *files[i : i + 64]], check=True)
    return before - tree_size(root)


def _remove(path: Path) -> int:
    size = tree_size(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    return size


def tree_size(path: Path) -> int:
    """Apparent size in bytes of a file or all files below a folder (what Lambda counts)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


# --------------------------------------------------------------------------------------------- verification


@dataclass
class ElfInfo:
    """What :func:`read_elf` learns about a shared object."""

    machine: int
    needed: list[str] = field(default_factory=list)
    soname: str | None = None


def read_elf(path: Path) -> ElfInfo | None:
    """Parse a little-endian ELF64 file's machine and dynamic section; ``None`` if not ELF64-LE."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    machine = struct.unpack_from("<H", data, 18)[0]
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    info = ElfInfo(machine=machine)
    for sec in sections:
        if sec[1] != 6:  # SHT_DYNAMIC
            continue
        strtab = sections[sec[6]]
        str_off = strtab[4]
        for off in range(sec[4], sec[4] + sec[5], 16):
            tag, val = struct.unpack_from("<qQ", data, off)
            if tag == 0:
                break
            if tag in (1, 14):  # DT_NEEDED, DT_SONAME
                end = data.index(b"\0", str_off + val)
                name = data[str_off + val : end].decode()
                if tag == 1:
                    info.needed.append(name)
                else:
                    info.soname = name
    return info


def _elf_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and (".so" in path.name or path.suffix == ""):
            with open(path, "rb") as fh:
                if fh.read(4) == b"\x7fELF":
                    yield path


def verify_files(root: Path, arch: str) -> list[str]:
    """Static checks that work for any target architecture; returns a list of problems."""
    problems: list[str] = []
    machine = ELF_MACHINES[arch]
    ext_ok = re.compile(rf"\.(cpython-312-{EXT_MACHINES[arch]}-linux-gnu|abi3)\.so$")
    available = {p.name for p in root.rglob("*.so*")}
    elves = list(_elf_files(root))
    if not elves:
        problems.append("no shared objects found; the layer looks empty")
    for path in elves:
        rel = path.relative_to(root).as_posix()
        info = read_elf(path)
        if info is None:
            problems.append(f"{rel}: not a little-endian ELF64 file")
            continue
        if info.machine != machine:
            problems.append(f"{rel}: ELF machine {info.machine}, expected {machine} ({arch})")
        if ".cpython-" in path.name and not ext_ok.search(path.name):
            problems.append(f"{rel}: extension module not built for CPython 3.12 on {arch}")
        for lib in info.needed:
            if lib not in available and lib not in SYSTEM_LIBRARIES:
                problems.append(f"{rel}: needs {lib}, which is neither in the layer nor a system library")
    for path in root.rglob("*.so"):
        if re.search(r"\.cpython-3(?!12)\d+-", path.name):
            problems.append(f"{path.relative_to(root).as_posix()}: built for another CPython")
    return problems


def normalized_listing(site: Path) -> set[str]:
    """Files below ``site`` with the architecture and auditwheel hashes taken out of their names."""
    out = set()
    for path in site.rglob("*"):
        if path.is_file():
            rel = path.relative_to(site).as_posix()
            rel = re.sub(r"\.cpython-312-(x86_64|aarch64)-linux-gnu\.so$", ".EXT.so", rel)
            out.add(re.sub(r"-[0-9a-f]{8}(\.so[.\d]*)$", r"-HASH\1", rel))
    return out


def compare_with_other_arch(out: Path, arch: str) -> list[str]:
    """Differences between this layer's files and the other architecture's layer, if that one is built.

    The x86_64 layer can be imported and smoke-tested here; an identical file list is the best
    evidence available for the arm64 one short of running it on Graviton.
    """
    other = "x86_64" if arch == "arm64" else "arm64"
    other_site = out / f"layer-{other}" / "python"
    if not other_site.is_dir():
        return []
    mine, theirs = normalized_listing(out / f"layer-{arch}" / "python"), normalized_listing(other_site)
    return [f"only in {arch}: {f}" for f in sorted(mine - theirs)] + [
        f"only in {other}: {f}" for f in sorted(theirs - mine)
    ]


SMOKE_TEST = r"""
import importlib.util, io, sys, tempfile, time
t0 = time.perf_counter()
import numpy, pyarrow as pa, pyarrow.compute as pc, pyarrow.dataset as ds, pyarrow.fs as pafs
import pyarrow.ipc as ipc, pyarrow.parquet as pq
import duckdb, sqlglot, pydantic
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.event_handler import APIGatewayRestResolver
import_s = time.perf_counter() - t0
assert sys.version_info[:2] == (3, 12), sys.version
assert all(p.startswith(sys.argv[1]) for p in (pa.__file__, duckdb.__file__, numpy.__file__, sqlglot.__file__))
t = pa.table({"k": pa.array([1, 2, 3, 1], pa.int64()), "v": pa.array([1.5, 2.0, 3.0, 4.5])})
with tempfile.TemporaryDirectory() as d:
    pq.write_table(t, d + "/t.parquet", compression="zstd")
    assert pq.read_table(d + "/t.parquet").equals(t)
    assert ds.dataset(d, format="parquet").to_table(filter=pc.field("k") == 1).num_rows == 2
buf = io.BytesIO()
with ipc.new_stream(buf, t.schema, options=ipc.IpcWriteOptions(compression="lz4")) as w:
    w.write_table(t)
assert ipc.open_stream(buf.getvalue()).read_all().equals(t)
assert pc.sum(t["v"]).as_py() == 11.0
pafs.S3FileSystem(region="us-east-1", anonymous=True)  # libarrow_s3 loads
pafs.LocalFileSystem()
con = duckdb.connect()
con.register("t", t)
assert con.sql("SELECT k, sum(v) AS s FROM t GROUP BY k ORDER BY k").to_arrow_table().num_rows == 3
assert sqlglot.transpile("SELECT 1 AS x", read="duckdb")[0] == "SELECT 1 AS x"
assert importlib.util.find_spec("pyarrow.flight") is None
APIGatewayRestResolver()
Logger(service="squall-layer-check")
print(f"import {import_s:.2f}s, pyarrow {pa.__version__}, duckdb {duckdb.__version__}, numpy {numpy.__version__}")
"""


def find_python312() -> str | None:
    """A working CPython 3.12 interpreter on this machine, if any."""
    candidates = [shutil.which("python3.12")]
    candidates += sorted(str(p) for p in Path.home().glob(".pyenv/versions/3.12*/bin/python3.12"))
    candidates += ["/usr/bin/python3.12", "/usr/local/bin/python3.12"]
    for cand in candidates:
        if not cand or not os.access(cand, os.X_OK):
            continue
        probe = subprocess.run([cand, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True)
        if probe.returncode == 0 and probe.stdout.strip() == b"(3, 12)":
            return cand
    return None


def host_arch() -> str | None:
    """The Lambda architecture name of this machine, if it is one."""
    return {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine().lower()
    )


def smoke_test(site: Path, runtime: Path, python: str) -> str:
    """Import the layer with ``python`` (site-packages disabled) and run :data:`SMOKE_TEST`.

    ``runtime`` stands in for the packages of the Lambda runtime (``/var/runtime``: boto3 and its
    closure); it goes on ``sys.path`` after the layer, as on Lambda.
    """
    script = f"import sys; sys.path[:0] = [{str(site)!r}, {str(runtime)!r}]\n" + SMOKE_TEST
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tempfile.gettempdir()}
    env["POWERTOOLS_TRACE_DISABLED"] = "1"
    proc = subprocess.run(
        [python, "-S", "-E", "-B", "-c", script, str(site)], capture_output=True, text=True, env=env, cwd="/"
    )
    if proc.returncode != 0:
        raise SystemExit(f"layer smoke test failed with {python}:\n{proc.stdout}{proc.stderr}")
    return proc.stdout.strip()


# --------------------------------------------------------------------------------------------- packaging


def write_zip(layer_dir: Path, zip_path: Path) -> int:
    """Zip ``layer_dir`` (holding ``python/``) deterministically; return the zip's size."""
    tmp = zip_path.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for path in sorted(layer_dir.rglob("*")):
            if not path.is_file():
                continue
            info = zipfile.ZipInfo(path.relative_to(layer_dir).as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | (path.stat().st_mode & 0o777)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            with open(path, "rb") as src, zf.open(info, "w") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    tmp.replace(zip_path)
    return zip_path.stat().st_size


def check_size(size: int, reserve: int) -> str:
    """Describe ``size`` against Lambda's limit minus ``reserve``; raise ``SystemExit`` when over."""
    budget = LAMBDA_UNZIPPED_LIMIT - reserve
    text = (
        f"unzipped size {mb(size)}; budget {mb(budget)} (Lambda limit {mb(LAMBDA_UNZIPPED_LIMIT)} - reserve)"
    )
    if size > budget:
        raise SystemExit(f"layer too large: {text}")
    return text


def mb(n: int) -> str:
    """Bytes as MB (10^6) with the raw count."""
    return f"{n / 1e6:.1f} MB ({n:,} bytes)"


def build(arch: str, out: Path, reserve: int, verify: bool = True, make_zip: bool = True) -> int:
    """Build the layer for ``arch`` under ``out``; return its unzipped size in bytes."""
    t0 = time.perf_counter()
    layer_dir = out / f"layer-{arch}"
    site = layer_dir / "python"
    wheels_dir = out / f"wheels-{arch}"
    requirements = layer_requirements()
    print(f"[layer {arch}] requirements: {' '.join(requirements)}")
    wheels = download(requirements, arch, wheels_dir)
    if layer_dir.exists():
        shutil.rmtree(layer_dir)
    site.mkdir(parents=True)
    runtime = wheels_dir / "runtime"  # what /var/runtime provides, for the smoke test only
    if runtime.exists():
        shutil.rmtree(runtime)
    runtime.mkdir()
    shipped = []
    for wheel in wheels:
        if wheel_distribution(wheel) in RUNTIME_PROVIDED:
            unpack_wheel(wheel, runtime)
            continue
        unpack_wheel(wheel, site)
        shipped.append(wheel.name)
    print(f"[layer {arch}] {len(shipped)} wheels: {', '.join(shipped)}")
    before = tree_size(site)
    freed = trim(site)
    print(f"[layer {arch}] unpacked {mb(before)}; trimmed:")
    stripped = strip_symbols(site, arch)
    if stripped is None:
        print(f"[layer {arch}] no strip tool for {arch} (install llvm or binutils): symbols kept")
    else:
        freed["static symbol tables of shared objects (llvm-strip/strip --strip-unneeded)"] = stripped
    for reason, n in sorted(freed.items(), key=lambda kv: -kv[1]):
        print(f"    -{n / 1e6:7.1f} MB  {reason}")
    size = tree_size(layer_dir)

    if verify:
        problems = verify_files(site, arch)
        if problems:
            raise SystemExit(f"[layer {arch}] verification failed:\n  " + "\n  ".join(problems))
        print(f"[layer {arch}] static checks ok (ELF machine, cp312 tags, DT_NEEDED resolved)")
        diff = compare_with_other_arch(out, arch)
        if diff:
            raise SystemExit(
                f"[layer {arch}] file list differs from the other architecture's:\n  " + "\n  ".join(diff)
            )
        python = find_python312() if host_arch() == arch else None
        if python:
            print(f"[layer {arch}] smoke test with {python}: {smoke_test(site, runtime, python)}")
        else:
            print(f"[layer {arch}] no CPython 3.12 for {arch} on this machine: import smoke test skipped")

    print(f"[layer {arch}] {check_size(size, reserve)}")
    if make_zip:
        zip_size = write_zip(layer_dir, out / f"layer-{arch}.zip")
        print(f"[layer {arch}] wrote {out / f'layer-{arch}.zip'}: {mb(zip_size)}")
    print(f"[layer {arch}] done in {time.perf_counter() - t0:.0f}s")
    return size


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--arch", choices=sorted(PLATFORMS), action="append", help="repeatable; default arm64"
    )
    parser.add_argument("--out", type=Path, default=REPO / "build", help="output folder (default: build/)")
    parser.add_argument(
        "--reserve-mb",
        type=float,
        default=DEFAULT_RESERVE_BYTES / 2**20,
        help="MiB kept free under the 250 MB limit for function code (default: %(default)s)",
    )
    parser.add_argument("--no-verify", action="store_true", help="skip the checks and smoke test")
    parser.add_argument("--no-zip", action="store_true", help="leave the folder only")
    args = parser.parse_args(argv)
    for arch in args.arch or ["arm64"]:
        build(
            arch, args.out, int(args.reserve_mb * 2**20), verify=not args.no_verify, make_zip=not args.no_zip
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
