"""What the chaos test checks, with the writing sessions paused (``Workload.gate``):

- writes: every acknowledged row of ``chaos_events`` is there exactly once,
  every acknowledged delete took, a row of unknown outcome is there at most
  once, an insert of unknown outcome is all there or not at all, and no row
  is there that was never sent;
- views: each maintained view (``workload.MAINTAINED``) equals PostgreSQL's
  answer to its SQL over the same table contents, loaded into a scratch
  PostgreSQL database;
- catalog: the catalog itself (name resolution, through ``EXPLAIN``) agrees
  with the DDL ledger, and ``mz_catalog.mz_tables``/``mz_views``/``mz_objects``
  and ``SHOW TABLES``/``SHOW VIEWS`` (queries over them) equal it within
  ``catalog_bound`` seconds (``CATALOG_BOUND`` by default);
- processes: one process per service and replica, at most one Spark JVM,
  and nothing that was once below ``loupe up`` running outside it.

Each check returns its findings (empty when all is well) as sentences.
"""

from __future__ import annotations

import time
from collections import Counter
from decimal import Decimal
from typing import Any

import psycopg

from loupe.common.errors import LoupeError
from loupe.testing.chaos.workload import (
    FIXED_TABLES,
    FIXED_VIEWS,
    GROUPS,
    LABELS,
    MAINTAINED,
    Ledger,
    Session,
)
from loupe.testing.procs import Proc, Tracker

CATALOG_BOUND = 30.0
ORPHAN_GRACE = 20.0
SINGLETONS = ("catalog", "controller", "coordinator", "nats")


class Checker:
    def __init__(
        self, port: int, postgres_url: str, *, catalog_bound: float = CATALOG_BOUND
    ) -> None:
        self.catalog_bound = catalog_bound
        self.port = port
        self.postgres_url = postgres_url
        self.catalog_lags: list[float] = []
        self.lost: list[int] = []  # acknowledged rows missing, at each check
        self.confirmed_dropped: set[str] = set()
        with psycopg.connect(postgres_url, autocommit=True) as pg:
            pg.execute(
                "CREATE TABLE chaos_dims (grp int NOT NULL, label text NOT NULL);"
                "CREATE TABLE chaos_events (id bigint NOT NULL, writer int NOT NULL,"
                " grp int NOT NULL, amount int NOT NULL)"
            )
            with pg.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO chaos_dims VALUES (%s, %s)",
                    [(grp, LABELS[grp % len(LABELS)]) for grp in range(GROUPS)],
                )

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        session = Session(self.port, "chaos-checker", timeout=60)
        try:
            return session.execute(sql)
        finally:
            session.close()

    def data(self, ledger: Ledger) -> list[str]:
        """The writes and the views; returns findings."""
        rows = self.query("SELECT id, writer, grp, amount FROM chaos_events")
        findings, lost = check_rows(rows, ledger)
        self.lost.append(lost)
        findings += self.compare_views(rows)
        return findings

    def compare_views(self, rows: list[tuple[Any, ...]]) -> list[str]:
        findings = []
        with psycopg.connect(self.postgres_url, autocommit=True) as pg:
            pg.execute("TRUNCATE chaos_events")
            with pg.cursor() as cursor, cursor.copy("COPY chaos_events FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            for view, select in MAINTAINED.items():
                expected = normalized(pg.execute(select).fetchall())
                actual = normalized(self.query(f"SELECT * FROM {view}"))
                if expected != actual:
                    findings.append(
                        f"view {view} differs from PostgreSQL: missing {sorted(expected - actual)[:5]}"
                        f" extra {sorted(actual - expected)[:5]}"
                    )
        return findings

    def catalog(self, ledger: Ledger, bound: float | None = None) -> list[str]:
        """The catalog itself (name resolution) against the DDL ledger, then the catalog
        relations and SHOW (queries over them) against the catalog, eventually: within
        ``bound`` seconds (default ``catalog_bound``)."""
        bound = self.catalog_bound if bound is None else bound
        findings, truth = self.resolved(ledger)
        began = time.monotonic()
        while True:
            relations = self.catalog_relations()
            differences = [
                f"{relation} lists {sorted(listed - truth[kind])[:8]} that the catalog does not"
                f" have and lacks {sorted(truth[kind] - listed)[:8]}"
                for relation, (kind, listed) in relations.items()
                if listed != truth[kind]
            ]
            if not differences:
                self.catalog_lags.append(time.monotonic() - began)
                return findings
            if time.monotonic() - began > bound:
                lag = f"catalog after {bound:.0f}s: "
                return [*findings, lag + "; ".join(differences)]
            time.sleep(1)

    def resolved(self, ledger: Ledger) -> tuple[list[str], dict[str, set[str]]]:
        """Which of the DDL session's objects the catalog has (``EXPLAIN`` resolves a name
        through the coordinator's catalog, reading no relation); findings where that
        contradicts an acknowledged CREATE or DROP. Objects once confirmed dropped are
        not asked again."""
        findings = []
        truth: dict[str, set[str]] = {"table": set(FIXED_TABLES), "view": set(FIXED_VIEWS)}
        with ledger.lock:
            objects = dict(ledger.objects)
        for name, state in sorted(objects.items()):
            if name in self.confirmed_dropped:
                continue
            exists = self.resolves(name)
            if state == "present" and not exists:
                findings.append(f"catalog: {name} was created (acknowledged) but does not resolve")
            if state == "absent" and exists:
                findings.append(f"catalog: {name} was dropped (acknowledged) but still resolves")
            if state == "absent" and not exists:
                self.confirmed_dropped.add(name)
            if exists:
                truth["view" if name.startswith("chaos_ddl_v") else "table"].add(name)
        return findings, truth

    def resolves(self, name: str) -> bool:
        try:
            self.query(f"EXPLAIN SELECT * FROM {name}")
        except LoupeError as error:
            if error.code == "42P01":
                return False
            raise
        return True

    def catalog_relations(self) -> dict[str, tuple[str, set[str]]]:
        """User tables and views of schema public, as each catalog relation lists them."""

        def listed(relation: str, kind: str | None = None) -> set[str]:
            typed = f" AND o.type = '{kind}'" if kind else ""
            rows = self.query(
                f"SELECT o.name FROM mz_catalog.{relation} o JOIN mz_catalog.mz_schemas s"
                f" ON s.id = o.schema_id WHERE s.name = 'public' AND o.id LIKE 'u%'{typed}"
            )
            return names(rows)

        return {
            "mz_tables": ("table", listed("mz_tables")),
            "mz_views": ("view", listed("mz_views")),
            "mz_objects (tables)": ("table", listed("mz_objects", "table")),
            "mz_objects (views)": ("view", listed("mz_objects", "view")),
            "SHOW TABLES": ("table", names(self.query("SHOW TABLES"))),
            "SHOW VIEWS": ("view", names(self.query("SHOW VIEWS"))),
        }


def names(rows: list[tuple[Any, ...]]) -> set[str]:
    return {row[0] for row in rows}


def normalized(rows: list[tuple[Any, ...]]) -> set[tuple[Any, ...]]:
    """Rows as comparable values: numerics from either side as exact decimals."""

    def value(v: Any) -> Any:
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, int | float | Decimal):
            return Decimal(str(v)).normalize()
        return v

    counted = Counter(tuple(value(v) for v in row) for row in rows)
    return {(*row, n) for row, n in counted.items()}


def check_rows(rows: list[tuple[Any, ...]], ledger: Ledger) -> tuple[list[str], int]:
    """The table against the ledger (see the module doc): (findings, acknowledged rows lost)."""
    seen = Counter(int(row[0]) for row in rows)
    with ledger.lock:
        states = dict(ledger.rows)
        batches = list(ledger.batches)
    findings = []
    lost = [i for i, state in states.items() if state == "present" and seen[i] == 0]
    doubled = [i for i, n in seen.items() if n > 1]
    undeleted = [i for i, state in states.items() if state == "deleted" and seen[i]]
    phantom = [i for i in seen if i not in states]
    if lost:
        findings.append(f"lost {len(lost)} acknowledged rows, e.g. ids {sorted(lost)[:10]}")
    if doubled:
        findings.append(
            f"{len(doubled)} rows present more than once, e.g. ids {sorted(doubled)[:10]}"
        )
    if undeleted:
        findings.append(
            f"{len(undeleted)} acknowledged deletes did not take: {sorted(undeleted)[:10]}"
        )
    if phantom:
        findings.append(f"{len(phantom)} rows never sent are present: {sorted(phantom)[:10]}")
    torn = [b for b in batches if len({seen[i] > 0 for i in b if states[i] == "maybe"}) > 1]
    if torn:
        findings.append(f"{len(torn)} inserts of unknown outcome are partly there: {torn[:5]}")
    return findings, len(lost)


def check_processes(tracker: Tracker, replicas: set[str]) -> list[str]:
    """One process per service and per replica in ``replicas``, at most one Spark JVM, and
    no orphans; waits up to ``ORPHAN_GRACE`` seconds for dying processes to go."""
    deadline = time.monotonic() + ORPHAN_GRACE
    while True:
        findings = process_findings(tracker.snapshot(), tracker.orphans(), replicas)
        if not findings or time.monotonic() > deadline:
            return findings
        time.sleep(1)


def process_findings(tree: list[Proc], orphans: list[Proc], replicas: set[str]) -> list[str]:
    roles = Counter(proc.role for proc in tree)
    findings = [f"{roles[role]} {role} processes, not 1" for role in SINGLETONS if roles[role] != 1]
    if roles["spark"] > 1:
        findings.append(f"{roles['spark']} Spark JVMs")
    for replica in sorted(replicas):
        if roles[f"replica:{replica}"] != 1:
            findings.append(f"{roles[f'replica:{replica}']} processes of replica {replica}, not 1")
    strays = sorted(r for r in roles if r.startswith("replica:") and r[8:] not in replicas)
    if strays:
        findings.append(f"processes of replicas not in the catalog: {strays}")
    findings += [f"orphan process {p.pid} ({p.role}, state {p.state})" for p in orphans]
    return findings
