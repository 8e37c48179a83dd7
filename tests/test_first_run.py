"""First run: `make run` installs only the engine; the package declares every folder it ships (no setuptools
warnings on `pip install -e .`); the README's design document is in the repository."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: what `make run` must never install: test tools, linters, the deploy tooling
HEAVY = ("test", "infra", "aws", "pandas", "checkov", "moto", "ruff", "pytest", "aws-cdk", "cfn-lint")


def _dry_run(target: str, tmp_path: Path) -> list[str]:
    """The commands `make -n TARGET` would run in a fresh clone (no .venv, no data)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    proc = subprocess.run(["make", "-n", target], cwd=tmp_path, capture_output=True, text=True, check=True)
    return proc.stdout.splitlines()


def test_make_run_installs_only_the_engine(tmp_path):
    lines = _dry_run("run", tmp_path)
    installs = [ln for ln in lines if "pip install" in ln]
    assert installs, lines
    for line in installs:
        spec = line.split("pip install", 1)[1]
        assert not any(word in spec for word in HEAVY), f"`make run` installs more than the engine: {line}"
        assert not re.search(r"\.\[", spec), f"`make run` installs extras: {line}"
    assert any("squall.demo" in ln for ln in lines)
    assert not any("checkov" in ln or "build_ffi" in ln or "apt-get" in ln for ln in lines)


#: distributions `make run` must not have installed (names as `pip list` prints them, lower-cased)
DEV_TOOLING = {
    "aws-cdk-lib",
    "constructs",
    "moto",
    "pytest",
    "ruff",
    "checkov",
    "cfn-lint",
    "schemathesis",
    "selenium",
    "aws-lambda-powertools",
    "pandas",
    "import-linter",
    "mypy",
}


def _fresh_copy(dest: Path) -> None:
    """The working tree as a fresh clone has it: the files git tracks plus new ones it does not ignore (so
    uncommitted changes are what is tested), without .venv, data/ or build/; a plain copy without git."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(
            ROOT, dest, ignore=shutil.ignore_patterns(".git", ".venv", "data", "build", "__pycache__")
        )
        return
    for name in listed.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():  # a deleted file is still listed until it is committed
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def test_first_run_make_run_in_a_fresh_clone(tmp_path):
    """Really runs `make run SF=0.01 WORKERS=2` in a fresh copy of the repository, with the machine's
    Python (pip takes the wheels from its cache, filled by `make test`): the demo prints its queries'
    results, and the new .venv holds the engine's dependencies only. About 1 minute on 2 cores."""
    if shutil.which("make") is None or shutil.which("git") is None:
        pytest.skip("make or git is not installed")
    clone = tmp_path / "squall"
    clone.mkdir()
    _fresh_copy(clone)
    python = getattr(sys, "_base_executable", None) or sys.executable  # not this venv's python
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "SQUALL_DATA")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    started = time.monotonic()
    proc = subprocess.run(
        ["make", "--no-print-directory", "run", "SF=0.01", "WORKERS=2", f"PYTHON={python}"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    took = time.monotonic() - started
    assert proc.returncode == 0, (
        f"make run failed after {took:.0f} s:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    out = proc.stdout
    assert "Squall " in out and "2 local workers" in out, out[-3000:]
    for q in ("Q01", "Q03", "Q05", "Q06", "Q10", "Q12", "Q14", "Q19"):
        assert f"== TPC-H {q} " in out, f"{q} missing:\n{out[-3000:]}"
    assert re.search(r"^\(\d+ rows?\)$", out, re.M), out[-3000:]  # a result table was printed
    assert "all queries in" in out and "Traceback" not in proc.stderr, proc.stderr[-3000:]

    listed = subprocess.run(
        [str(clone / ".venv/bin/python"), "-m", "pip", "list", "--format=json"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installed = {p["name"].lower().replace("_", "-") for p in json.loads(listed)}
    assert "squall" in installed and "duckdb" in installed, installed
    assert installed & DEV_TOOLING == set(), (
        f"`make run` installed deploy/test tooling: {installed & DEV_TOOLING}"
    )


def test_make_test_installs_the_rest_on_top(tmp_path):
    lines = _dry_run("test", tmp_path)
    installs = " ".join(ln for ln in lines if "pip install" in ln)
    assert "-e '.[test,pandas,infra,aws]'" in installs and "checkov" in installs


def _declared() -> tuple[set[str], dict[str, str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(config["packages"]), config["package-dir"]


def test_every_shipped_folder_is_a_declared_package():
    """setuptools warns ("Package 'squall.tpch.queries' is absent from the `packages` configuration") for a
    folder of data files inside a package that is not itself listed."""
    packages, package_dir = _declared()
    missing = []
    for package in sorted(packages):
        top = package.split(".")
        base = next(
            (ROOT / package_dir[".".join(top[:i])] / Path(*top[i:]))
            for i in range(len(top), 0, -1)
            if ".".join(top[:i]) in package_dir
        )
        for sub in sorted(p for p in base.iterdir() if p.is_dir()):
            if sub.name.startswith((".", "_")) or sub.name.endswith(".egg-info"):
                continue
            if any(f.is_file() for f in sub.iterdir()) and f"{package}.{sub.name}" not in packages:
                missing.append(f"{package}.{sub.name}")
    assert missing == []


def test_readme_links_the_design_document_in_the_repo():
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\(([^)\s]*DESIGN\.md)\)|`([^`\s]*DESIGN\.md)`", readme)
    targets = [a or b for a, b in links]
    assert targets, "the README names no design document"
    for target in targets:
        assert not target.startswith(".."), f"{target} is outside the repository"
        assert (ROOT / target).is_file(), target
    design = (ROOT / "docs" / "DESIGN.md").read_text()
    for folder in ("driver/planner/", "driver/platforms/", "squall/service/", "squall/plan.py"):
        assert folder in design, folder
