"""Build the cffi (API mode) extension ``squall_fabric._native`` from ``squall_fabric.c``.

Usage (``make native`` runs the first form)::

    python rdma-backend/build_ffi.py --apt      # install libfabric-dev with apt if missing (root only)
    python rdma-backend/build_ffi.py            # build only; say what to install if libfabric is missing
    python rdma-backend/build_ffi.py --force    # rebuild even if the installed module is up to date

The module is compiled under ``rdma-backend/build/`` and installed into the
running interpreter's site-packages (the project venv) as
``squall_fabric/_native.<abi>.so``; ``squall.exchange.fabric`` imports it from
there. Without libfabric (or the Python headers) the script says what is missing and exits 0, so
``make test`` still runs (the fabric tests then skip with that reason); a
compile error with libfabric present exits 1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
HEADER = HERE / "squall_fabric.h"
SOURCE = HERE / "squall_fabric.c"
BUILD = HERE / "build"
MODULE = "squall_fabric._native"
APT_PACKAGES = ["libfabric-dev", "libfabric-bin", "pkg-config", "gcc"]
INSTALL_HINT = "apt-get install libfabric-dev pkg-config gcc (Debian/Ubuntu), then `make native`"


def cdef_text() -> str:
    """The declarations between the CDEF markers of the header."""
    text = HEADER.read_text()
    start = text.index("/* CDEF-BEGIN */") + len("/* CDEF-BEGIN */")
    return text[start : text.index("/* CDEF-END */")]


def have_libfabric() -> bool:
    if shutil.which("pkg-config") is None:
        return False
    return subprocess.run(["pkg-config", "--exists", "libfabric"], check=False).returncode == 0


def have_python_headers() -> bool:
    return (Path(sysconfig.get_paths()["include"]) / "Python.h").exists()


def apt_install() -> bool:
    """Install the build prerequisites with apt when we may; True if it ran."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return False
    packages = APT_PACKAGES + ([] if have_python_headers() else ["python3-dev"])
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print(f"build_ffi: installing {' '.join(packages)} with apt-get", flush=True)
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", *packages], check=True, env=env)
    return True


def install_dir() -> Path:
    return Path(sysconfig.get_paths()["platlib"]) / "squall_fabric"


def installed_module() -> Path:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return install_dir() / f"_native{suffix}"


def up_to_date() -> bool:
    target = installed_module()
    if not target.exists():
        return False
    newest = max(p.stat().st_mtime for p in (HEADER, SOURCE, Path(__file__)))
    return target.stat().st_mtime >= newest


def pkg_config(*args: str) -> list[str]:
    out = subprocess.run(["pkg-config", *args, "libfabric"], check=True, capture_output=True, text=True)
    return out.stdout.split()


def build() -> Path:
    """Compile the extension into BUILD; return the path of the built module."""
    from cffi import FFI

    cflags = pkg_config("--cflags")
    libs = pkg_config("--libs")
    ffibuilder = FFI()
    ffibuilder.cdef(cdef_text())
    ffibuilder.set_source(
        MODULE,
        '#include "squall_fabric.h"',
        sources=[str(SOURCE)],
        include_dirs=[str(HERE)] + [f[2:] for f in cflags if f.startswith("-I")],
        library_dirs=[f[2:] for f in libs if f.startswith("-L")],
        libraries=[f[2:] for f in libs if f.startswith("-l")] or ["fabric"],
        extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"]
        + [f for f in cflags if not f.startswith("-I")],
    )
    BUILD.mkdir(exist_ok=True)
    return Path(ffibuilder.compile(tmpdir=str(BUILD), verbose=False))


def install(built: Path) -> Path:
    target = installed_module()
    target.parent.mkdir(parents=True, exist_ok=True)
    init = target.parent / "__init__.py"
    if not init.exists():
        init.write_text(
            '"""Native libfabric core of Squall\'s fabric exchange (built by rdma-backend/build_ffi.py)."""\n'
        )
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copy2(built, tmp)
    os.replace(tmp, target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--apt", action="store_true", help="apt-get install libfabric-dev when missing (root)"
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = parser.parse_args(argv)

    missing = not have_libfabric() or not have_python_headers()
    if missing and args.apt:
        apt_install()
    if not have_libfabric():
        print(
            "build_ffi: libfabric development files not found (pkg-config libfabric); "
            f"the fabric exchange stays unavailable. Install: {INSTALL_HINT}",
            file=sys.stderr,
        )
        return 0
    if not have_python_headers():
        print(
            f"build_ffi: Python.h not found under {sysconfig.get_paths()['include']}; "
            "install the interpreter's development headers (Debian: python3-dev)",
            file=sys.stderr,
        )
        return 0
    if not args.force and up_to_date():
        print(f"build_ffi: {installed_module()} is up to date")
        return 0
    try:
        built = build()
    except Exception as exc:  # compiler errors: the message is the useful part
        print(f"build_ffi: building {MODULE} failed: {exc}", file=sys.stderr)
        return 1
    target = install(built)
    print(f"build_ffi: installed {target} (libfabric {pkg_config('--modversion')[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
