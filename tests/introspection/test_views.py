"""Every introspection view (``loupe.introspection.views``): planned for both schemas with
Materialize's columns, and run on the engine over raw log rows, against the same relation
computed here in Python from Materialize's definitions.

Two replicas' raw logs (two workers each) hold what a replica logs: worker 1
lags worker 0 (its frontiers, an operator worker 0 lacks), ``count`` logs
carry their values as multiplicities, and some values cancel (errors that
sum to 0). ``mz_introspection`` reads the first replica's; ``mz_internal``
reads both, each row tagged with its replica and incarnation, and a join
must never pair rows of two replicas (the second replica's ids collide with
the first's on purpose).
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import pytest

from loupe.introspection.logs import BY_NAME
from loupe.introspection.views import INTERNAL, INTROSPECTION, VIEWS, render

from .harness import plan, run

Row = tuple[Any, ...]
Logs = dict[str, list[tuple[Row, int]]]
PEEK = str(uuid.UUID(int=0xAA))


def _structure(worker: int, extra: bool) -> dict[str, list[Row]]:
    """Dataflows 1 (an index: source, reduce, arrangement) and 2; a hierarchical top-k
    region in dataflow 3 (as Materialize renders one). ``extra``: an operator only this
    worker has."""
    operators = [
        (10, [1], "Dataflow: u5"),
        (11, [1, 1], "Source(u1)"),
        (12, [1, 2], "Reduce"),
        (13, [1, 3], "ArrangeBy"),
        (20, [2], "Dataflow: u6"),
        (21, [2, 1], "Mfp"),
        (40, [3], "Dataflow: u7"),
        (41, [3, 1], "TopK region"),
        (42, [3, 1, 1], "Arranged TopK input"),
        (43, [3, 1, 2], "Arranged TopK input"),
        (44, [3, 1, 3], "Arranged TopK input"),
    ]
    if extra:
        operators.append((99, [1, 9], "Only on worker 1"))
    return {
        "mz_dataflow_operators_per_worker": [(i, worker, n) for i, _, n in operators],
        # Channels 30, 31 live in dataflow 1's scope: their address is the scope's.
        "mz_dataflow_addresses_per_worker": [(i, worker, a) for i, a, _ in operators]
        + [(30, worker, [1]), (31, worker, [1])],
        "mz_dataflow_channels_per_worker": [
            (30, worker, 1, 0, 2, 0, "pipeline"),
            (31, worker, 0, 0, 1, 0, "exchange"),  # from the scope's own input
        ],
    }


def _replica(scale: int) -> Logs:
    """One replica's raw logs; ``scale`` varies the measured values between replicas."""
    logs: dict[str, list[tuple[Row, int]]] = {}

    def state(name: str, *rows: Row) -> None:
        logs.setdefault(name, []).extend((r, 1) for r in rows)

    def count(name: str, *rows: tuple[Row, int]) -> None:
        logs.setdefault(name, []).extend((r, n * scale) for r, n in rows)

    for worker in (0, 1):
        for name, rows in _structure(worker, extra=worker == 1).items():
            state(name, *rows)
        state("mz_compute_exports_per_worker", ("u5", worker, 1), ("u6", worker, 2))
        state("mz_compute_dataflow_global_ids_per_worker", (1, worker, "u5"), (2, worker, "u6"))
        state("mz_compute_frontiers_per_worker", ("u5", worker, 100 - 10 * worker))
        state("mz_compute_import_frontiers_per_worker", ("u5", "u1", worker, 95 + worker))
        state(
            "mz_compute_lir_mapping_per_worker",
            ("u5", 2, worker, "Reduce", 1, 1, 12, 13),
            ("u5", 1, worker, "Arrange", None, 0, 13, 14),
        )
    state("mz_active_peeks_per_worker", (PEEK, 0, "u5", "index", 7), (PEEK, 1, "u5", "index", 7))
    state("mz_compute_error_counts_raw", ("u5", 0, 3), ("u5", 1, -3), ("u6", 0, 2 * scale))
    state("mz_compute_hydration_times_per_worker", ("u5", 0, 1000))
    count(
        "mz_scheduling_elapsed_raw",
        ((10, 0), 2500),  # the dataflow's scope: its operators' time and its own
        ((11, 0), 500),
        ((11, 1), 300),
        ((12, 0), 1000),
    )
    count("mz_compute_operator_durations_histogram_raw", ((11, 0, 512), 4), ((11, 1, 512), 1))
    count("mz_scheduling_parks_histogram_raw", ((0, 1024, 2048), 6), ((1, 1024, 2048), 1))
    count("mz_peek_durations_histogram_raw", ((0, "index", 1024), 3), ((1, "index", 1024), 2))
    channel = (30, 0, 1)
    count("mz_message_counts_sent_raw", (channel, 4), ((31, 1, 0), 9))
    count("mz_message_counts_received_raw", (channel, 4))
    count("mz_message_batch_counts_sent_raw", (channel, 2))
    count("mz_message_batch_counts_received_raw", (channel, 1))
    count(
        "mz_dataflow_operator_reachability_raw",
        ((10, 0, 1, 0, "source", 5), 2),  # operator 1 of scope 10: operator 11
        ((11, 0, 0, 1, "target", None), 1),  # the operator itself
    )
    count("mz_arrangement_records_raw", ((13, 0), 5), ((13, 1), 7))
    count("mz_arrangement_batches_raw", ((13, 0), 2))
    count("mz_arrangement_heap_size_raw", ((13, 0), 1024))
    count("mz_arrangement_batcher_size_raw", ((13, 1), 64))
    count("mz_arrangement_batcher_records_raw", ((12, 0), 3))
    count("mz_arrangement_heap_allocations_raw", ((13, 0), 2), ((13, 0), -1))
    count("mz_arrangement_sharing_raw", ((13, 0), 2), ((13, 1), 2))
    # The top-k hierarchy: the second level holds nearly the first's records (cut it),
    # the third far fewer.
    for operator, records, size in ((42, 1000, 100), (43, 950, 90), (44, 100, 10)):
        count("mz_arrangement_records_raw", ((operator, 0), records))
        count("mz_arrangement_heap_size_raw", ((operator, 0), size))
    return logs


REPLICAS = {("u1", 1): _replica(1), ("u2", 3): _replica(2)}
CATALOG = {
    "mz_catalog.mz_objects": [
        (("u5", "u3", "idx", "index", "u1", "u1"), 1),
        (("u6", "u3", "mv", "materialized-view", "u1", "u1"), 1),
    ],
    "mz_catalog.mz_schemas": [(("u3", "u1", "public", "u1", None), 1)],
    "mz_catalog.mz_databases": [(("u1", "materialize", "u1", None), 1)],
}


def _data(schema: str) -> dict[str, list[tuple[Row, int]]]:
    """The raw logs as ``schema`` holds them, and the catalog."""
    data: dict[str, list[tuple[Row, int]]] = {}
    for (replica, incarnation), logs in REPLICAS.items():
        if schema == INTROSPECTION and replica != "u1":
            continue
        for name, rows in logs.items():
            if schema == INTERNAL:
                rows = [((replica, incarnation, *r), d) for r, d in rows]
            data.setdefault(f"{schema}.{name}", []).extend(rows)
    return data | _catalog_rows()


def _catalog_rows() -> dict[str, list[tuple[Row, int]]]:
    from loupe.builtins import MZ_DATABASES, MZ_SCHEMAS

    width = {"mz_catalog.mz_schemas": len(MZ_SCHEMAS.columns)}
    width["mz_catalog.mz_databases"] = len(MZ_DATABASES.columns)
    rows = dict(CATALOG)
    for name, n in width.items():
        rows[name] = [(r[:n] + (None,) * (n - len(r)), d) for r, d in CATALOG[name]]
    return rows


# -- Materialize's definitions, in Python, over one replica's raw logs -----------------


class Model:
    """One replica's views, computed from its raw logs as Materialize defines them."""

    def __init__(self, logs: Logs) -> None:
        self.logs = logs

    def bag(self, name: str) -> Counter[Row]:
        counts: Counter[Row] = Counter()
        for row, diff in self.logs.get(name, []):
            counts[_key(row)] += diff
        return +counts

    def rows(self, name: str) -> list[Row]:
        return list(self.bag(name).elements())

    def counted(self, name: str) -> list[Row]:
        """A ``count`` log: each row with its multiplicity as the value."""
        return [(*r, n) for r, n in self.bag(name).items()]

    def view(self, name: str) -> list[Row]:
        return getattr(self, name)()

    def worker_zero(self, name: str, drop: int = 1) -> list[Row]:
        """``name``_per_worker's worker-0 rows without their worker column (position ``drop``)."""
        return [r[:drop] + r[drop + 1 :] for r in self.view(name + "_per_worker") if r[drop] == 0]

    @staticmethod
    def summed(rows: Iterable[Row], keys: int) -> list[Row]:
        sums: dict[Row, list[Decimal]] = {}
        for row in rows:
            total = sums.setdefault(row[:keys], [Decimal(0)] * (len(row) - keys))
            for i, value in enumerate(row[keys:]):
                total[i] += value
        return [(*k, *v) for k, v in sums.items()]

    # The operator graph.
    def mz_dataflows_per_worker(self) -> list[Row]:
        ops = {(i, w): n for i, w, n in self.rows("mz_dataflow_operators_per_worker")}
        return [
            (a[0], w, ops[(i, w)])
            for i, w, a in self.rows("mz_dataflow_addresses_per_worker")
            if len(a) == 1 and (i, w) in ops
        ]

    def mz_dataflows(self) -> list[Row]:
        return self.worker_zero("mz_dataflows")

    def mz_dataflow_addresses_per_worker(self) -> list[Row]:
        return self.rows("mz_dataflow_addresses_per_worker")

    def mz_dataflow_addresses(self) -> list[Row]:
        return self.worker_zero("mz_dataflow_addresses")

    def mz_dataflow_channels_per_worker(self) -> list[Row]:
        return self.rows("mz_dataflow_channels_per_worker")

    def mz_dataflow_channels(self) -> list[Row]:
        return self.worker_zero("mz_dataflow_channels")

    def mz_dataflow_operators_per_worker(self) -> list[Row]:
        return self.rows("mz_dataflow_operators_per_worker")

    def mz_dataflow_operators(self) -> list[Row]:
        return self.worker_zero("mz_dataflow_operators")

    def mz_dataflow_global_ids(self) -> list[Row]:
        rows = self.rows("mz_compute_dataflow_global_ids_per_worker")
        return [(i, g) for i, w, g in rows if w == 0]

    def mz_lir_mapping(self) -> list[Row]:
        rows = self.rows("mz_compute_lir_mapping_per_worker")
        return [r[:2] + r[3:] for r in rows if r[2] == 0]

    def mz_compute_exports(self) -> list[Row]:
        return [(e, d) for e, w, d in self.rows("mz_compute_exports_per_worker") if w == 0]

    def mz_mappable_objects(self) -> list[Row]:
        objects = {r[0][0]: r[0] for r in CATALOG["mz_catalog.mz_objects"]}
        schema = {r[0][0]: r[0] for r in CATALOG["mz_catalog.mz_schemas"]}
        database = {r[0][0]: r[0][1] for r in CATALOG["mz_catalog.mz_databases"]}
        global_ids = self.mz_dataflow_global_ids()
        rows = []
        for export, dataflow in self.mz_compute_exports():
            if export not in objects:
                continue
            _, schema_id, name, *_ = objects[export]
            _, database_id, schema_name, *_ = schema[schema_id]
            prefix = f"{database[database_id]}." if database_id in database else ""
            for dataflow_id, global_id in global_ids:
                if dataflow_id == dataflow:
                    rows.append((f"{prefix}{schema_name}.{name}", global_id))
        return rows

    def mz_dataflow_operator_dataflows_per_worker(self) -> list[Row]:
        ops = self.rows("mz_dataflow_operators_per_worker")
        addresses = {(i, w): a for i, w, a in self.rows("mz_dataflow_addresses_per_worker")}
        dataflows = {(i, w): n for i, w, n in self.mz_dataflows_per_worker()}
        rows = []
        for i, w, name in ops:
            address = addresses.get((i, w))
            if address and (address[0], w) in dataflows:
                rows.append((i, name, w, address[0], dataflows[(address[0], w)]))
        return rows

    def mz_dataflow_operator_dataflows(self) -> list[Row]:
        return self.worker_zero("mz_dataflow_operator_dataflows", drop=2)

    def mz_compute_frontiers(self) -> list[Row]:
        least: dict[str, int] = {}
        for export, _, time in self.rows("mz_compute_frontiers_per_worker"):
            least[export] = min(least.get(export, time), time)
        return list(least.items())

    def mz_compute_import_frontiers(self) -> list[Row]:
        least: dict[tuple[str, str], int] = {}
        for export, import_, _, time in self.rows("mz_compute_import_frontiers_per_worker"):
            least[(export, import_)] = min(least.get((export, import_), time), time)
        return [(*k, t) for k, t in least.items()]

    def mz_dataflow_channel_operators_per_worker(self) -> list[Row]:
        addresses = {(i, w): a for i, w, a in self.rows("mz_dataflow_addresses_per_worker")}
        ops = {(i, w) for i, w, _ in self.rows("mz_dataflow_operators_per_worker")}
        by_address = {(a, w): i for (i, w), a in addresses.items() if (i, w) in ops}
        rows = []
        for channel, w, from_index, _, to_index, _, kind in self.rows(
            "mz_dataflow_channels_per_worker"
        ):
            if (channel, w) not in addresses:
                continue
            scope = addresses[(channel, w)]
            start, end = (*scope, from_index), (*scope, to_index)
            rows.append(
                (channel, w, by_address.get((start, w)), start, by_address.get((end, w)), end, kind)
            )
        return rows

    def mz_dataflow_channel_operators(self) -> list[Row]:
        return self.worker_zero("mz_dataflow_channel_operators")

    # Arrangements.
    def mz_arrangement_sizes_per_worker(self) -> list[Row]:
        parts = {
            "records": ("records", "batcher_records"),
            "batches": ("batches",),
            "size": ("heap_size", "batcher_size"),
            "capacity": ("heap_capacity", "batcher_capacity"),
            "allocations": ("heap_allocations", "batcher_allocations"),
        }
        ops = {(i, w) for i, w, _ in self.rows("mz_dataflow_operators_per_worker")}
        values: dict[tuple[int, int], dict[str, int]] = {}
        for column, raws in parts.items():
            for raw in raws:
                for (operator, worker), n in self.bag(f"mz_arrangement_{raw}_raw").items():
                    if (operator, worker) in ops:
                        entry = values.setdefault((operator, worker), {})
                        entry[column] = entry.get(column, 0) + n
        return [(*k, *(v.get(c) for c in parts)) for k, v in values.items()]

    def mz_arrangement_sizes(self) -> list[Row]:
        rows = self.mz_arrangement_sizes_per_worker()
        return _sum_nullable(((r[0], *r[2:]) for r in rows), (0,))

    def mz_arrangement_sharing_per_worker(self) -> list[Row]:
        return self.counted("mz_arrangement_sharing_raw")

    def mz_arrangement_sharing(self) -> list[Row]:
        return self.worker_zero("mz_arrangement_sharing")

    def mz_records_per_dataflow_operator_per_worker(self) -> list[Row]:
        sizes = {(r[0], r[1]): r[2:] for r in self.mz_arrangement_sizes_per_worker()}
        return [
            (i, name, w, dataflow, *sizes.get((i, w), (None,) * 5))
            for i, name, w, dataflow, _ in self.mz_dataflow_operator_dataflows_per_worker()
        ]

    def mz_records_per_dataflow_operator(self) -> list[Row]:
        rows = self.mz_records_per_dataflow_operator_per_worker()
        return _sum_nullable(((*r[:2], *r[3:]) for r in rows), (0, 1, 2))

    def mz_records_per_dataflow_per_worker(self) -> list[Row]:
        names = {(i, w): n for i, w, n in self.mz_dataflows_per_worker()}
        rows = [
            (r[3], names[(r[3], r[2])], r[2], *r[4:])
            for r in self.mz_records_per_dataflow_operator_per_worker()
            if (r[3], r[2]) in names
        ]
        return _sum_nullable(rows, (0, 1, 2))

    def mz_records_per_dataflow(self) -> list[Row]:
        rows = self.mz_records_per_dataflow_per_worker()
        return _sum_nullable(((*r[:2], *r[3:]) for r in rows), (0, 1))

    def mz_dataflow_arrangement_sizes(self) -> list[Row]:
        sizes = {r[0]: r[1:] for r in self.mz_arrangement_sizes()}
        rows = [
            (dataflow, dataflow_name, *sizes.get(i, (None,) * 5))
            for i, _, dataflow, dataflow_name in self.mz_dataflow_operator_dataflows()
        ]
        return _sum_nullable(rows, (0, 1))

    # Counters and histograms.
    def mz_peek_durations_histogram_per_worker(self) -> list[Row]:
        return self.counted("mz_peek_durations_histogram_raw")

    def mz_peek_durations_histogram(self) -> list[Row]:
        return self.summed((r[1:] for r in self.mz_peek_durations_histogram_per_worker()), 2)

    def mz_scheduling_elapsed_per_worker(self) -> list[Row]:
        return self.counted("mz_scheduling_elapsed_raw")

    def mz_scheduling_elapsed(self) -> list[Row]:
        return self.summed(((i, n) for i, _, n in self.mz_scheduling_elapsed_per_worker()), 1)

    def mz_compute_operator_durations_histogram_per_worker(self) -> list[Row]:
        return self.counted("mz_compute_operator_durations_histogram_raw")

    def mz_compute_operator_durations_histogram(self) -> list[Row]:
        rows = self.mz_compute_operator_durations_histogram_per_worker()
        return self.summed(((i, d, n) for i, _, d, n in rows), 2)

    def mz_scheduling_parks_histogram_per_worker(self) -> list[Row]:
        return self.counted("mz_scheduling_parks_histogram_raw")

    def mz_scheduling_parks_histogram(self) -> list[Row]:
        return self.summed((r[1:] for r in self.mz_scheduling_parks_histogram_per_worker()), 2)

    def mz_compute_error_counts_per_worker(self) -> list[Row]:
        return self.rows("mz_compute_error_counts_raw")

    def mz_compute_error_counts(self) -> list[Row]:
        rows = self.summed(((e, n) for e, _, n in self.mz_compute_error_counts_per_worker()), 1)
        return [r for r in rows if r[1] != 0]

    def mz_message_counts_per_worker(self) -> list[Row]:
        kinds = ("message_counts_sent", "message_counts_received")
        kinds += ("message_batch_counts_sent", "message_batch_counts_received")
        bags = [self.bag(f"mz_{k}_raw") for k in kinds]
        return [(*c, *(b[c] for b in bags)) for c in bags[0] if all(c in b for b in bags)]

    def mz_message_counts(self) -> list[Row]:
        return self.summed(((r[0], *r[3:]) for r in self.mz_message_counts_per_worker()), 1)

    def mz_active_peeks(self) -> list[Row]:
        return [
            (i, o, t, time)
            for i, w, o, t, time in self.rows("mz_active_peeks_per_worker")
            if w == 0
        ]

    def mz_dataflow_operator_reachability_per_worker(self) -> list[Row]:
        addresses = self.rows("mz_dataflow_addresses_per_worker")
        counts: Counter[Row] = Counter()
        for (operator, w, source, port, kind, time), n in self.bag(
            "mz_dataflow_operator_reachability_raw"
        ).items():
            for i1, w1, a1 in addresses:
                if i1 != operator or w1 != w:
                    continue
                target = a1 if source == 0 else (*a1, source)
                for i2, w2, a2 in addresses:
                    if w2 == w and a2 == target:
                        counts[(i2, w, port, kind, time)] += n
        return [(*k, n) for k, n in counts.items()]

    def mz_dataflow_operator_reachability(self) -> list[Row]:
        rows = self.mz_dataflow_operator_reachability_per_worker()
        return self.summed(((r[0], *r[2:]) for r in rows), 4)

    def mz_dataflow_operator_parents_per_worker(self) -> list[Row]:
        ops = {(i, w) for i, w, _ in self.rows("mz_dataflow_operators_per_worker")}
        addresses = [
            (i, w, a) for i, w, a in self.rows("mz_dataflow_addresses_per_worker") if (i, w) in ops
        ]
        return [
            (i, parent, w)
            for i, w, a in addresses
            for parent, pw, pa in addresses
            if pw == w and pa == a[:-1]
        ]

    def mz_dataflow_operator_parents(self) -> list[Row]:
        return [(i, p) for i, p, w in self.mz_dataflow_operator_parents_per_worker() if w == 0]

    def mz_expected_group_size_advice(self) -> list[Row]:
        """Levels of min/max/top-k regions whose input is within 15 % of the first level's."""
        names = ("Arranged TopK input", "Arranged MinsMaxesHierarchical input")
        names += ("Arrange ReduceMinsMaxes",)
        addresses = dict(self.mz_dataflow_addresses())
        by_address = {a: i for i, a in addresses.items()}
        operators = dict(self.mz_dataflow_operators())
        sizes = {r[0]: r for r in self.mz_arrangement_sizes()}
        dataflows = {i: (d, dn) for i, _, d, dn in self.mz_dataflow_operator_dataflows()}
        regions: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
        for i, _, dataflow, _ in self.mz_dataflow_operator_dataflows():
            region = by_address.get(addresses.get(i, (0,))[:-1])
            if operators.get(i) in names and i in sizes and region in operators:
                regions.setdefault((dataflow, region), []).append((i, sizes[i][1], sizes[i][3]))
        rows = []
        for (dataflow, region), levels in regions.items():
            pivot = min(levels)
            cut = [lv for lv in levels if lv[0] != pivot[0] and lv[1] >= pivot[1] * Decimal("0.85")]
            if cut:
                hint = 16.0 ** (len(levels) - len(cut)) - 1
                savings = sum(Decimal(lv[2]) for lv in cut)
                _, dataflow_name = dataflows[region]
                rows.append(
                    (
                        dataflow,
                        dataflow_name,
                        region,
                        operators[region],
                        len(levels),
                        len(cut),
                        savings,
                        hint,
                    )
                )
        return rows


def _sum_nullable(rows: Iterable[Row], keys: tuple[int, ...]) -> list[Row]:
    """Group by the ``keys`` positions; every other column summed (SQL's: NULLs skipped, NULL
    when all are)."""
    groups: dict[Row, list[int | None]] = {}
    for row in rows:
        key = tuple(row[k] for k in keys)
        values = [v for i, v in enumerate(row) if i not in keys]
        total = groups.setdefault(key, [None] * len(values))
        for i, value in enumerate(values):
            if value is not None:
                total[i] = (total[i] or 0) + value
    return [(*k, *v) for k, v in groups.items()]


def _key(value: Any) -> Any:
    """Lists as tuples, to count and compare rows."""
    if isinstance(value, list | tuple):
        return tuple(_key(v) for v in value)
    return value


def _normal(rows: Iterable[Row]) -> Counter[Row]:
    return Counter(tuple(_scalar(v) for v in _key(r)) for r in rows)


def _scalar(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Decimal | float) and value == int(value):
        return int(value)
    return value


def expected(name: str, schema: str) -> Counter[Row]:
    rows: list[Row] = []
    for (replica, incarnation), logs in REPLICAS.items():
        if schema == INTROSPECTION and replica != "u1":
            continue
        prefix = (replica, incarnation) if schema == INTERNAL else ()
        rows += [(*prefix, *r) for r in Model(logs).view(name)]
    return _normal(rows)


SCHEMAS = (INTROSPECTION, INTERNAL)
CASES = [(name, schema) for name in VIEWS for schema in SCHEMAS]


@pytest.mark.parametrize(("name", "schema"), CASES, ids=[f"{s}.{n}" for n, s in CASES])
def test_view_has_materializes_columns(name: str, schema: str) -> None:
    """The planned view's columns and types are the declared ones (Materialize's, with
    replica_id and incarnation in front in mz_internal)."""
    relation = plan(f"SELECT * FROM {schema}.{name}", schema)
    assert tuple(relation.columns) == VIEWS[name].columns_in(schema)


@pytest.mark.parametrize(("name", "schema"), CASES, ids=[f"{s}.{n}" for n, s in CASES])
def test_view_computes_materializes_relation(name: str, schema: str) -> None:
    rows = run(f"SELECT * FROM {schema}.{name}", schema, _data(schema))
    want = expected(name, schema)
    assert want, f"the sample data gives {name} no rows: the test would prove nothing"
    assert _normal(rows) == want


def test_every_view_is_materializes() -> None:
    """The 42 views of Materialize's mz_introspection, each ``_per_worker`` one with its
    global form, none named as a raw log."""
    assert len(VIEWS) == 42
    per_worker = {n.removesuffix("_per_worker") for n in VIEWS if n.endswith("_per_worker")}
    assert per_worker <= set(VIEWS)
    assert not set(VIEWS) & set(BY_NAME)


def test_templates_render_only_known_placeholders() -> None:
    for view in VIEWS.values():
        for schema in SCHEMAS:
            assert "{" not in render(view.template, schema), view.name


def test_views_are_in_dependency_order() -> None:
    """Each view reads only views listed before it: the order to create them in."""
    names = list(VIEWS)
    for position, view in enumerate(VIEWS.values()):
        read = set(re.findall(r"\{s\}\.(\w+)", view.template)) & set(VIEWS)
        assert all(names.index(r) < position for r in read), view.name
