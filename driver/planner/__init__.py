"""The distributed planner (see :mod:`squall.driver.planner.core`)."""

from squall.driver.planner.core import Planner, PlannerOptions

__all__ = ["Planner", "PlannerOptions"]
