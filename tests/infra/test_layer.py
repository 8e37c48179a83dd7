"""The Lambda layer build (infra/layer/build_layer.py): requirements, trimming, verification, packaging.

The build itself downloads wheels from PyPI and is run by `make layer`, not here. When a layer was
built in this checkout, its folder is checked too.
"""

from __future__ import annotations

import importlib.util
import platform
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from .helpers import LAYER_SCRIPT, REPO

spec = importlib.util.spec_from_file_location("build_layer", LAYER_SCRIPT)
assert spec and spec.loader
bl = importlib.util.module_from_spec(spec)
sys.modules["build_layer"] = bl
spec.loader.exec_module(bl)


def test_requirements_come_from_pyproject():
    reqs = bl.layer_requirements()
    names = {bl.requirement_name(r) for r in reqs}
    assert {
        "duckdb",
        "pyarrow",
        "sqlglot",
        "numpy",
        "aws-lambda-powertools",
        "pydantic",
        "aws-xray-sdk",
    } <= names
    assert not names & {"boto3", "tpchgen-cli"}
    assert "sqlglot>=30,<31" in reqs  # without [c]: the compiled sqlglot does not fit the size budget
    assert bl.requirement_name("aws-lambda-powertools[validation]>=3") == "aws-lambda-powertools"
    assert bl.requirement_name("Foo_Bar.baz ; python_version>'3'") == "foo-bar-baz"


@pytest.mark.parametrize("arch,machine", [("arm64", "aarch64"), ("x86_64", "x86_64")])
def test_platform_tags(arch, machine):
    tags = bl.platform_tags(arch)
    assert tags[0] == f"manylinux_2_28_{machine}"
    assert f"manylinux_2_17_{machine}" in tags and f"manylinux2014_{machine}" in tags
    assert all(t.endswith(machine) for t in tags)
    assert not any(t.startswith(("manylinux_2_29", "manylinux_2_3")) for t in tags)


def _touch(path: Path, size: int = 10) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


def test_trim_rules(tmp_path):
    site = tmp_path / "python"
    keep = [
        "pyarrow/__init__.py",
        "pyarrow/parquet/__init__.py",
        "pyarrow/ipc.py",
        "pyarrow/lib.cpython-312-x86_64-linux-gnu.so",
        "pyarrow/libarrow.so.2600",
        "pyarrow/libarrow_python.so.2600",
        "pyarrow/libparquet.so.2600",
        "pyarrow/libarrow_s3.so.2600",
        "numpy/_core/_multiarray_umath.cpython-312-x86_64-linux-gnu.so",
        "numpy/testing/__init__.py",
        "sqlglot/tests_helpers.py",
        "duckdb/__init__.py",
    ]
    drop = [
        "pyarrow/_flight.cpython-312-x86_64-linux-gnu.so",
        "pyarrow/flight.py",
        "pyarrow/libarrow_flight.so.2600",
        "pyarrow/libarrow_python_flight.so.2600",
        "pyarrow/include/arrow/api.h",
        "pyarrow/src/arrow/python/x.cc",
        "pyarrow/lib.pyx",
        "pyarrow/lib.pxd",
        "pyarrow/tests/test_array.py",
        "pyarrow/_pyarrow_cpp_tests.cpython-312-x86_64-linux-gnu.so",
        "pyarrow/libarrow_python.so",
        "pyarrow/libarrow_python.so.2600.1.0",
        "numpy/_core/tests/test_x.py",
        "numpy/tests/test_y.py",
        "numpy/_core/include/numpy/x.h",
        "duckdb/__pycache__/__init__.cpython-312.pyc",
        "_duckdb-stubs/__init__.pyi",
    ]
    for rel in keep + drop:
        _touch(site / rel)
    freed = bl.trim(site)
    assert all((site / rel).exists() for rel in keep), [r for r in keep if not (site / r).exists()]
    assert not [rel for rel in drop if (site / rel).exists()]
    assert sum(freed.values()) == 10 * len(drop)


def test_duplicate_sonames_need_the_soname_copy_of_the_same_size(tmp_path):
    _touch(tmp_path / "libfoo.so", 10)
    _touch(tmp_path / "libfoo.so.1.2.3", 10)
    _touch(tmp_path / "libbar.so", 10)  # no soname copy: kept
    _touch(tmp_path / "libbaz.so.3", 10)
    _touch(tmp_path / "libbaz.so", 11)  # different content: kept
    assert bl.duplicate_sonames(tmp_path) == []
    _touch(tmp_path / "libfoo.so.1", 10)
    assert sorted(p.name for p in bl.duplicate_sonames(tmp_path)) == ["libfoo.so", "libfoo.so.1.2.3"]


def test_unpack_wheel_handles_data_dirs(tmp_path):
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/__init__.py", "x = 1\n")
        zf.writestr("pkg-1.0.dist-info/METADATA", "Name: pkg\n")
        zf.writestr("pkg-1.0.data/purelib/pkg_extra.py", "")
        zf.writestr("pkg-1.0.data/scripts/pkg-tool", "#!/bin/sh\n")
        zf.writestr("pkg-1.0.data/headers/pkg.h", "")
    target = tmp_path / "site"
    bl.unpack_wheel(wheel, target)
    files = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file())
    assert files == ["pkg-1.0.dist-info/METADATA", "pkg/__init__.py", "pkg_extra.py"]
    assert (
        bl.wheel_distribution(Path("Aws_Lambda_Powertools-3.0-py3-none-any.whl")) == "aws-lambda-powertools"
    )


def test_size_budget():
    limit = bl.LAMBDA_UNZIPPED_LIMIT
    assert "budget" in bl.check_size(limit - bl.DEFAULT_RESERVE_BYTES, bl.DEFAULT_RESERVE_BYTES)
    with pytest.raises(SystemExit, match="too large"):
        bl.check_size(limit - bl.DEFAULT_RESERVE_BYTES + 1, bl.DEFAULT_RESERVE_BYTES)
    assert limit == 262_144_000


def test_zip_is_deterministic(tmp_path):
    layer = tmp_path / "layer"
    _touch(layer / "python" / "a" / "b.py", 100)
    (layer / "python" / "a" / "b.py").chmod(0o755)
    first, second = tmp_path / "1.zip", tmp_path / "2.zip"
    bl.write_zip(layer, first)
    bl.write_zip(layer, second)
    assert first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(first) as zf:
        (info,) = zf.infolist()
        assert info.filename == "python/a/b.py"
        assert (info.external_attr >> 16) & 0o777 == 0o755


host_is_x86 = pytest.mark.skipif(platform.machine() != "x86_64", reason="uses this machine's x86_64 pyarrow")


@host_is_x86
def test_read_elf_and_verify_catch_wrong_abi_and_missing_libs(tmp_path):
    import pyarrow

    src = next(Path(pyarrow.__file__).parent.glob("_json.cpython-3*-x86_64-linux-gnu.so"))
    info = bl.read_elf(src)
    assert info is not None and info.machine == 62
    assert any(n.startswith("libarrow.so.") for n in info.needed)
    shutil.copy(src, tmp_path / src.name)
    problems = bl.verify_files(tmp_path, "x86_64")
    if "cpython-312" not in src.name:
        assert any("another CPython" in p or "not built for CPython 3.12" in p for p in problems)
    assert any("needs libarrow" in p for p in problems)
    assert any("ELF machine 62" in p for p in bl.verify_files(tmp_path, "arm64"))
    assert bl.read_elf(Path(pyarrow.__file__)) is None  # not ELF


@pytest.mark.parametrize("arch", ["arm64", "x86_64"])
def test_built_layer_if_present(arch):
    """Checks a layer built by `make layer` in this checkout (skipped otherwise)."""
    site = REPO / "build" / f"layer-{arch}" / "python"
    if not (site / "pyarrow").is_dir():
        pytest.skip(f"no built layer for {arch}")
    assert bl.verify_files(site, arch) == []
    assert bl.compare_with_other_arch(REPO / "build", arch) == []
    bl.check_size(bl.tree_size(site.parent), bl.DEFAULT_RESERVE_BYTES)
    for module in (
        "pyarrow/parquet",
        "pyarrow/_s3fs",
        "pyarrow/_compute",
        "pyarrow/ipc.py",
        "pyarrow/_dataset",
    ):
        assert list(site.glob(module + "*")), module
    assert not list(site.glob("pyarrow/_flight*")) and not list(site.glob("boto3*"))
