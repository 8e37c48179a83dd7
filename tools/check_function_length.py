"""Fail when a function (or method) in the driver or the service is longer than ``LIMIT`` lines.

Long functions hide the steps they are made of; past the limit, split where the pieces have names. Counted
from the ``def`` line to the function's last line, nested functions included (``make check-arch``).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("driver", "squall/service")
LIMIT = 80


def long_functions(folders: tuple[str, ...] = FOLDERS, limit: int = LIMIT) -> list[tuple[str, int, str, int]]:
    """(file, line, name, length) of every function over ``limit`` lines under ``folders``."""
    found = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > limit:
                        found.append((str(path.relative_to(ROOT)), node.lineno, node.name, length))
    return found


def main() -> int:
    found = long_functions()
    for path, line, name, length in found:
        print(f"{path}:{line}: {name} is {length} lines (limit {LIMIT})")
    print(f"check_function_length: {len(found)} functions over {LIMIT} lines")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
