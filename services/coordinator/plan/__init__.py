"""Query planning: SQL to MIR (relational IR) to LIR (physical plan), and EXPLAIN.

A pure library: nothing here touches the catalog or the engine directly.
``plan_query`` lowers a parsed SELECT to MIR through a catalog callback,
``lower_to_lir`` lowers MIR to LIR (assigning every LIR node its id) and
``explain`` renders either plan as text.
"""

from loupe.coordinator.plan.explain import explain
from loupe.coordinator.plan.lir import lower_to_lir
from loupe.coordinator.plan.sql import Resolver, plan_query

__all__ = ["Resolver", "explain", "lower_to_lir", "plan_query"]
