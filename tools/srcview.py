"""Build ``build/srcview/squall``: the installed package tree, as Python sees it, out of symlinks.

Squall's distribution maps several top-level folders into one namespace
(``squall.driver`` → ``driver/``, … — pyproject's ``package-dir``). Static tools
(mypy, import-linter) resolve modules from the file system and know nothing of
that mapping, so this script mirrors the mapping as real folders with one
symlink per source file. Run by ``make check-arch``; error paths point at the
symlinks, whose targets are the real files.
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(out: Path) -> Path:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = cfg["package-dir"]
    if out.exists():
        shutil.rmtree(out)
    for package, folder in sorted(mapping.items()):
        src = ROOT / folder
        dest = out.joinpath(*package.split("."))
        for path in sorted(src.rglob("*.py")):
            rel = path.relative_to(src)
            # a sub-folder that is itself mapped elsewhere (none today) would be skipped here
            if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
                continue
            target = dest / rel
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(path)
        (dest / "py.typed").touch()
    return out


if __name__ == "__main__":
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "srcview"))
