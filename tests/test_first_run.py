"""First run: `make run` installs only the engine; the package declares every folder it ships (no setuptools
warnings on `pip install -e .`); the README's design document is in the repository."""

from __future__ import annotations

import re
import shutil
import subprocess
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
