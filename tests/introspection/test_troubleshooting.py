"""Materialize's troubleshooting queries (``troubleshooting.sql``) parse and plan in Loupe.

Each query of the corpus is planned as a session's SELECT against the
introspection relations (views inlined, raw logs as the planner's
relations); those naming ``mz_introspection`` are planned again with that
schema read as ``mz_internal`` (every replica's rows, replica columns in
front), which Loupe adds. Entries marked ``-- skip:`` say why they cannot
run; they stay in the corpus so that the gap is visible. Running them end to
end on a replica is the story tests' job.
"""

from __future__ import annotations

import pytest

from loupe.interval import Interval
from loupe.introspection.troubleshooting import Entry, entries
from loupe.introspection.views import INTERNAL, INTROSPECTION

from .harness import plan_one_off, run
from .test_views import _data

ENTRIES = entries()
RUNNABLE = [e for e in ENTRIES if not e.skip]


def test_corpus_is_complete() -> None:
    """Every entry names its source; skips are few and explained."""
    assert len(ENTRIES) == len({e.name for e in ENTRIES}) >= 25
    assert all(e.source for e in ENTRIES)
    assert {e.name for e in ENTRIES if e.skip} == {
        "operator_durations_histogram_subscribe",
        "dropped_index_dependents",
        "replica_cpu",
        "explain_analyze_6",
    }


@pytest.mark.parametrize("entry", RUNNABLE, ids=[e.name for e in RUNNABLE])
def test_query_plans_on_a_replica(entry: Entry) -> None:
    """As written; a query naming ``mz_internal`` (older documentation's home of these
    relations) reads Loupe's persisted relations there, for every replica."""
    schema = INTERNAL if "mz_internal." in entry.sql else INTROSPECTION
    planned = plan_one_off(entry.sql, schema)
    assert planned.columns


QUALIFIED = [e for e in RUNNABLE if "mz_introspection." in e.sql]


@pytest.mark.parametrize("entry", QUALIFIED, ids=[e.name for e in QUALIFIED])
def test_query_plans_over_every_replica(entry: Entry) -> None:
    """The same query over ``mz_internal``: its relations there carry replica_id and
    incarnation in front, so ``SELECT *`` gains them and the rest reads the same."""
    planned = plan_one_off(entry.sql.replace("mz_introspection.", "mz_internal."), INTERNAL)
    assert planned.columns


@pytest.mark.parametrize("entry", RUNNABLE, ids=[e.name for e in RUNNABLE])
def test_query_runs_over_sample_logs(entry: Entry) -> None:
    """Each query runs on the engine over the raw logs of ``test_views`` (views inlined)."""
    schema = INTERNAL if "mz_internal." in entry.sql else INTROSPECTION
    run(entry.sql, schema, _data(schema))


def _rows(name: str) -> list[tuple[object, ...]]:
    entry = next(e for e in ENTRIES if e.name == name)
    return run(entry.sql, INTROSPECTION, _data(INTROSPECTION))


def test_arrangement_sizes_read_as_documented() -> None:
    """Dataflow 1 arranges 5 + 7 records (operator 13) and 3 in a batcher (operator 12):
    1024 + 64 bytes, printed by pg_size_pretty; dataflow 2 arranges nothing."""
    rows = {r[0]: r[1:] for r in _rows("dataflow_arrangement_sizes")}
    assert rows[1] == ("Dataflow: u5", 15, "1088 bytes")
    assert rows[2] == ("Dataflow: u6", None, None)


def test_group_size_advice_reads_as_documented() -> None:
    """The top-k region's second level holds 950 of the first level's 1000 records:
    one level of three to cut, so 16^2 - 1."""
    assert _rows("expected_group_size_advice") == [("Dataflow: u7", "TopK region", 3, 1, 255.0)]


def test_console_lists_lir_operators_addresses() -> None:
    """list_agg over addresses: a list of uint8 lists per LIR node."""
    rows = sorted(_rows("console_lir_operators"), key=lambda r: str(r[0]))
    assert rows == [(1, "Arrange", [[1, 3]]), (2, "Reduce", [[1, 2]])]


def test_elapsed_time_per_dataflow_and_per_operator() -> None:
    """The dataflow's scope (address of length 1) ran 2.5 µs (PostgreSQL rounds an interval's
    microseconds half to even); its operators, the addresses no other address extends,
    800 ns and 1 µs, the scope excluded."""
    assert _rows("dataflow_elapsed") == [(10, "Dataflow: u5", Interval(0, 0, 2))]
    rows = sorted(_rows("operator_elapsed"))
    assert rows == [
        (11, "Source(u1)", "Dataflow: u5", Interval(0, 0, 1)),
        (12, "Reduce", "Dataflow: u5", Interval(0, 0, 1)),
    ]
