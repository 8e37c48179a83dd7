"""Fail when any two modules of ``squall`` import each other, directly or through others.

Imports inside functions count too (grimp reads every import statement), so a
cycle cannot hide behind a lazy import. Run on the tree built by
``tools/srcview.py`` (``make check-arch``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import grimp


def cycles(graph: grimp.ImportGraph) -> list[tuple[str, ...]]:
    """One shortest cycle per pair of modules that import each other (deduplicated)."""
    seen: set[frozenset[str]] = set()
    found: list[tuple[str, ...]] = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is None:
                continue
            key = frozenset(back)
            if key not in seen:
                seen.add(key)
                found.append((importer, *back))
    return found


def main(root: str) -> int:
    sys.path.insert(0, str(Path(root).resolve()))
    graph = grimp.build_graph("squall", cache_dir=None)
    found = cycles(graph)
    for cycle in found:
        print("import cycle: " + " -> ".join(cycle))
    print(f"check_cycles: {len(graph.modules)} modules, {len(found)} cycles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build/srcview"))
