"""Fail when modules of ``squall`` import each other, directly or through others — or packages do.

Two checks on one import graph (grimp's, of the tree built by ``tools/srcview.py``; ``make check-arch``):

- **modules**: no two modules import each other, directly or through others;
- **packages**: inside every package, its children — modules and sub-packages, a sub-package counting as one
  node with everything below it, the package's own ``__init__`` as one more — import each other without a
  cycle. ``squall.connection`` and ``squall.service`` are two such nodes of ``squall``,
  ``squall.driver.logical`` and ``squall.driver.estimate`` two of ``squall.driver``: a module of each
  importing a module of the other is a package cycle even when no module cycle exists.

Imports inside functions count too (grimp reads every import statement), so a cycle cannot hide behind a
lazy import. ``from pkg import module`` imports ``pkg.module`` only, not ``pkg``'s ``__init__``: grimp 3
records it that way (it names the sub-module when the imported name is one), and :func:`imports` drops an
import of ``pkg`` whose every recorded line is ``from pkg import <sub-modules>`` in case a grimp version
records the package as well.
"""

from __future__ import annotations

import itertools
import re
import sys
from collections import deque
from pathlib import Path

import grimp

_FROM_IMPORT = re.compile(r"^from\s+([\w.]+)\s+import\s+([\w\s,]+?)\s*(?:#.*)?$")


def cycles(graph: grimp.ImportGraph) -> list[tuple[str, ...]]:
    """One shortest module cycle per pair of modules that import each other (deduplicated)."""
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


def _only_submodules(graph: grimp.ImportGraph, importer: str, package: str) -> bool:
    """True when every line by which ``importer`` imports ``package`` is ``from package import <modules>``."""
    details = graph.get_import_details(importer=importer, imported=package)
    if not details:
        return False
    for detail in details:
        match = _FROM_IMPORT.match(detail["line_contents"].strip())
        if match is None or match.group(1) != package:
            return False
        names = [n.split()[0] for n in match.group(2).split(",") if n.strip()]
        if not names or any(f"{package}.{name}" not in graph.modules for name in names):
            return False
    return True


def imports(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    """Every direct import (importer, imported), ``from pkg import module`` counted as ``pkg.module`` only."""
    found = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if graph.find_children(imported) and _only_submodules(graph, importer, imported):
                continue
            found.append((importer, imported))
    return found


def _sibling_edge(importer: str, imported: str) -> tuple[str, str, str] | None:
    """(package, importer's node, imported's node): the children of their deepest common package that hold
    them (the package itself standing for its ``__init__``), or None when both are in the same child."""
    a, b = importer.split("."), imported.split(".")
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    if common == len(a) == len(b):
        return None
    package = ".".join(a[:common])
    if not package:  # a module outside the root package (not in grimp's graph)
        return None
    here = ".".join(a[: common + 1])
    there = ".".join(b[: common + 1])
    return package, here, there


def package_cycles(graph: grimp.ImportGraph) -> list[tuple[str, tuple[str, ...], list[str]]]:
    """(package, cycle, steps): one shortest cycle among the children of a package per pair of children
    that import each other, with one import that makes each step (``importer -> imported``). A node equal
    to the package is its ``__init__``."""
    edges: dict[str, dict[str, set[str]]] = {}
    witness: dict[tuple[str, str], str] = {}
    for importer, imported in imports(graph):
        sibling = _sibling_edge(importer, imported)
        if sibling is None:
            continue
        package, here, there = sibling
        edges.setdefault(package, {}).setdefault(here, set()).add(there)
        witness.setdefault((here, there), f"{importer} -> {imported}")
    seen: set[frozenset[str]] = set()
    found: list[tuple[str, tuple[str, ...], list[str]]] = []
    for package in sorted(edges):
        children = edges[package]
        for here in sorted(children):
            for there in sorted(children[here]):
                back = _shortest_path(children, there, here)
                if back is None or frozenset(back) in seen:
                    continue
                seen.add(frozenset(back))
                cycle = (here, *back)
                found.append((package, cycle, [witness[step] for step in itertools.pairwise(cycle)]))
    return found


def _shortest_path(edges: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    previous: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [node]
            while (step := previous[path[-1]]) is not None:
                path.append(step)
            return path[::-1]
        for following in sorted(edges.get(node, ())):
            if following not in previous:
                previous[following] = node
                queue.append(following)
    return None


def _label(node: str, package: str) -> str:
    return f"{node} (__init__)" if node == package else node


def main(root: str) -> int:
    sys.path.insert(0, str(Path(root).resolve()))
    graph = grimp.build_graph("squall", cache_dir=None)
    found = cycles(graph)
    for cycle in found:
        print("import cycle: " + " -> ".join(cycle))
    packages = package_cycles(graph)
    for package, cycle, steps in packages:
        print("package cycle: " + " -> ".join(_label(node, package) for node in cycle))
        for step in steps:
            print(f"    {step}")
    print(
        f"check_cycles: {len(graph.modules)} modules, {len(found)} module cycles, {len(packages)} package cycles"
    )
    return 1 if found or packages else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build/srcview"))
