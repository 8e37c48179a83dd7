"""The context logical rules share (:class:`LogicalContext`) and what they must keep (:func:`result_columns`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from squall.driver.catalog.tables import Catalog
from squall.driver.ir import nodes as L
from squall.driver.options import PlannerOptions

if TYPE_CHECKING:
    from collections.abc import Callable


@dataclass
class LogicalContext:
    """What logical rules read and say: the catalog, the options, fresh internal names, and their notes."""

    catalog: Catalog
    options: PlannerOptions
    fresh: Callable[[str], str]
    #: plan notes the rules add (said in ``squall explain``)
    notes: list[str] = field(default_factory=list)
    #: the pairs :mod:`.coalesce` merged, and the plan as it was before (planned instead when the planner cuts
    #: the pair's sides apart after all)
    coalesced: list[Any] = field(default_factory=list)  # coalesce.Coalesced
    uncoalesced: L.Node | None = None


def result_columns(node: L.Node) -> tuple[str, ...]:
    """What a logical rule must keep: the plan's output column names, in order."""
    return node.names
