"""Query planning: SQL to MIR (relational IR) to LIR (physical plan), and EXPLAIN.

A pure library: nothing here touches the catalog or the engine directly.
``plan_query`` lowers a parsed SELECT to MIR through a catalog callback (for
maintained results: views, indexes); ``plan_select`` plans a one-off SELECT
and returns the outermost ORDER BY/LIMIT/OFFSET separately as a finishing;
``lower_to_lir`` lowers MIR to LIR (assigning every LIR node its id) and
``explain`` renders either plan as text. ``TemporalError`` (0A000) is raised
for now()/mz_now() where the plan has no query time (views). ``optimize``
(predicate and projection pushdown) is applied by both planners; run it
again on a plan whose views were inlined.
"""

from loupe.coordinator.plan.optimize import optimize
from loupe.coordinator.plan.scalars import TemporalError
from loupe.coordinator.plan.sql import PlannedQuery, Resolver, plan_query, plan_select
from loupe.plan.explain import explain
from loupe.plan.lir import lower_to_lir

__all__ = [
    "PlannedQuery",
    "Resolver",
    "TemporalError",
    "explain",
    "lower_to_lir",
    "optimize",
    "plan_query",
    "plan_select",
]
