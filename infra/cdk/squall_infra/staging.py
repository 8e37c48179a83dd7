"""Stage the Lambda assets on disk without Docker.

The repository keeps the ``squall.*`` packages in separate top-level folders (``driver/`` is
``squall.driver``, see ``[tool.setuptools] package-dir`` in ``pyproject.toml``). Lambda needs them
nested the way Python imports them, so :func:`stage_function_code` copies each folder to its import
path (``build/function-code/squall/driver/...``). The third-party dependencies are not in this asset:
they come from the layer built by ``infra/layer/build_layer.py``.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
#: Never shipped: bytecode, native builds for the build machine, tests, packaging metadata.
IGNORED = (
    "__pycache__",
    "*.pyc",
    "*.pyo",
    "*.so",
    "*.egg-info",
    "tests",
    ".pytest_cache",
    ".mypy_cache",
    ".DS_Store",
)
#: Handlers the stack points at; the staged asset must contain their packages.
HANDLER_PACKAGES = ("squall", "squall.functions")


def package_dirs(repo: Path = REPO) -> dict[str, Path]:
    """Import name -> source folder for every package the distribution ships (root packages only)."""
    setuptools = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = dict(setuptools.get("package-dir", {}))
    out: dict[str, Path] = {}
    for package in setuptools.get("packages", []):
        # a package listed without its own mapping lives below its parent's folder (squall.tpch)
        if package in mapping:
            out[package] = repo / mapping[package]
    return dict(sorted(out.items()))


def stage_function_code(dest: Path, repo: Path = REPO) -> Path:
    """Copy the ``squall`` packages into ``dest`` laid out by import name; return ``dest``.

    ``dest`` is emptied first. Files are copied in a fixed order with content only, so the CDK asset
    hash changes only when the code does.
    """
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for package, source in package_dirs(repo).items():
        if not source.is_dir():
            raise FileNotFoundError(f"package {package}: folder {source} does not exist")
        target = dest.joinpath(*package.split("."))
        shutil.copytree(source, target, ignore=shutil.ignore_patterns(*IGNORED), dirs_exist_ok=True,
                        copy_function=shutil.copyfile)  # fmt: skip
    for package in HANDLER_PACKAGES:
        init = dest.joinpath(*package.split("."), "__init__.py")
        if not init.is_file():
            raise FileNotFoundError(f"staged code lacks {init.relative_to(dest)}")
    return dest


def placeholder_layer(dest: Path) -> Path:
    """An almost empty layer folder, for synthesizing without a built layer (tests, ``make synth``).

    Deploying it gives functions that fail on ``import pyarrow``; ``app.py`` only uses it when asked
    with ``-c layerPath=placeholder``.
    """
    site = dest / "python"
    site.mkdir(parents=True, exist_ok=True)
    (site / "SQUALL_PLACEHOLDER_LAYER.txt").write_text(
        "Placeholder: build the real layer with `make layer ARCH=arm64|x86_64`.\n"
    )
    return dest


if __name__ == "__main__":  # `make stage`: python staging.py DEST (for the Terraform module)
    import sys

    print(stage_function_code(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "build" / "function-code"))
