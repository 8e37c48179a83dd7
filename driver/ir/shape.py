"""Equal subtrees up to internal column names.

Every read of a ``WITH`` query (or a view) is translated into a copy of one subtree under fresh column names.
:func:`shape_of` is a subtree with its internal names numbered in order of definition, so two copies have
equal shapes; :func:`signatures` is the cheap first test (node kinds, tables and widths) to run before it.

    >>> from squall.driver.ir import nodes as L
    >>> def read(suffix):
    ...     scan = L.Scan("t", (("a", "a" + suffix),))
    ...     return L.Aggregate(scan, (("k" + suffix, L.col("a" + suffix)),), ())
    >>> shape_of(read("")) == shape_of(read("_2"))
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from sqlglot import exp

from squall.driver.ir import nodes as L

#: the shape of a leaf this module does not know (a stage input), or None when it has none
LeafShape = Callable[[L.Node], "tuple[object, ...] | None"]


class _Numbers(dict[str, int]):
    """Internal column name → its number; names a renaming projection gives share their input's numbers."""

    def number(self, name: str) -> int:
        if name not in self:
            self[name] = self.count = getattr(self, "count", -1) + 1
        return self[name]


class NoShape(Exception):
    """A node that is not compared (a one-rank part, raw SQL)."""


def walk(node: L.Node) -> Iterator[L.Node]:
    """``node`` and every node below it, parents first."""
    yield node
    for child in node.children:
        yield from walk(child)


def signatures(root: L.Node) -> dict[int, object]:
    """Every node's cheap first test of equal shape (node kinds, tables and widths), by ``id``."""
    sigs: dict[int, object] = {}

    def sig(node: L.Node) -> object:
        got = (
            type(node).__name__,
            node.table if isinstance(node, L.Scan) else None,
            len(node.names),
            tuple(sig(c) for c in node.children),
        )
        sigs[id(node)] = got
        return got

    sig(root)
    return sigs


def shape_of(
    node: L.Node, leaf: LeafShape | None = None, see_through_renames: bool = False
) -> tuple[object, ...] | None:
    """``node`` up to its internal column names (numbered in order of definition), or None when some node in
    it is not compared. ``leaf`` gives the shape of node kinds this module does not know; with
    ``see_through_renames``, a projection that only renames all of its input's columns, in order, has its
    input's shape (the planner reads a stage computed once under each reader's names that way)."""
    try:
        return _shape(node, _Numbers(), leaf, see_through_renames)
    except NoShape:
        return None


def renames_all(node: L.Project) -> bool:
    """Whether ``node`` only renames every column of its input, in order."""
    inputs = node.input.names
    return len(node.exprs) == len(inputs) and all(
        type(e) is exp.Column and not e.table and e.name == name for (_n, e), name in zip(node.exprs, inputs)
    )


def _shape(node: L.Node, names: _Numbers, leaf: LeafShape | None, see_through: bool) -> tuple[object, ...]:
    if see_through and isinstance(node, L.Project) and renames_all(node):
        inner = _shape(node.input, names, leaf, see_through)
        for (new, _e), old in zip(node.exprs, node.input.names):
            names[new] = names[old]
        return inner
    kids = tuple(_shape(c, names, leaf, see_through) for c in node.children)
    out = tuple(names.number(n) for n in node.names)

    def e(x: exp.Expression | None) -> str | None:
        return None if x is None else canonical(x, names)

    own: tuple[object, ...] | None
    if isinstance(node, L.Scan):
        own = (node.table, tuple(src for src, _ in node.columns), tuple(map(e, node.filters)))
    elif isinstance(node, L.Filter):
        own = (e(node.predicate),)
    elif isinstance(node, L.Project):
        own = tuple(e(x) for _, x in node.exprs)
    elif isinstance(node, L.Join):
        keys = (tuple(map(e, node.left_keys)), tuple(map(e, node.right_keys)))
        own = (node.kind, keys, e(node.residual), node.null_aware)
    elif isinstance(node, L.Aggregate):
        calls = tuple(
            (a.func, tuple(map(e, a.args)), a.distinct, e(a.expression), a.filtered) for _, a in node.aggs
        )
        own = (tuple(e(x) for _, x in node.keys), calls, node.sets, node.by_key)
    elif isinstance(node, L.Sort):
        own = tuple((e(k.expression), k.descending, k.nulls_first) for k in node.keys)
    elif isinstance(node, L.Limit):
        own = (node.limit, node.offset)
    elif isinstance(node, L.SetOp):
        own = (node.kind, node.all)
    elif isinstance(node, L.Window):
        own = (tuple(e(x) for _, x in node.exprs), tuple(map(e, node.partition_by)))
    elif isinstance(node, L.Values):
        own = tuple(tuple(map(e, row)) for row in node.rows)
    else:
        own = leaf(node) if leaf is not None else None
        if own is None:
            raise NoShape(type(node).__name__)
    return (type(node).__name__, out, own, kids)


def canonical(x: exp.Expression, names: dict[str, int]) -> str:
    """``x`` as SQL with each internal column written as its number."""

    def number(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column) and not n.table and n.name in names:
            return exp.column(f"#{names[n.name]}", quoted=True)
        return n

    return L.sql_of(x.transform(number))
