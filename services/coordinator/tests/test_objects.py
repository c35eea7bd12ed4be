"""Compute objects from a catalog snapshot: definitions planned, dependencies derived, views inlined."""

from __future__ import annotations

from loupe.coordinator.catalog_state import CatalogState
from loupe.coordinator.objects import dependents, gets, id_order, inline_views
from loupe.proto.catalog.v1 import catalog_pb2

TABLE = 'CREATE TABLE "materialize"."public"."t" ("a" integer, "b" text)'


def snapshot(*items: tuple[str, str, str, str]) -> catalog_pb2.CatalogSnapshot:
    """A snapshot of database materialize, schema public, and ``(id, name, type, create_sql)``."""
    return catalog_pb2.CatalogSnapshot(
        databases=[catalog_pb2.Database(id="u1", name="materialize")],
        schemas=[catalog_pb2.Schema(id="u3", name="public", database_id="u1")],
        items=[
            catalog_pb2.Item(id=i, schema_id="u3", name=n, type=k, create_sql=sql, cluster_id="u1")
            for i, n, k, sql in items
        ],
    )


STATE = CatalogState(
    snapshot(
        (
            "u10",
            "w",
            "view",
            'CREATE VIEW "materialize"."public"."w" AS SELECT a FROM "materialize"."public"."v"',
        ),
        ("u2", "t", "table", TABLE),
        (
            "u9",
            "v",
            "view",
            'CREATE VIEW "materialize"."public"."v" AS SELECT a, b FROM "materialize"."public"."t" WHERE a > 1',
        ),
        ("u11", "v_idx", "index", 'CREATE INDEX "v_idx" ON "materialize"."public"."v" ("b")'),
    )
)


def test_ids_order_numerically() -> None:
    assert sorted(["u10", "u9", "s2", "u100"], key=id_order) == ["s2", "u9", "u10", "u100"]


def test_views_are_planned_in_dependency_order_with_their_dependencies() -> None:
    """w (u10) reads v (u9): loaded after it although listed first; indexes know their key."""
    v, w, index = STATE.objects["u9"], STATE.objects["u10"], STATE.objects["u11"]
    assert (v.columns, v.depends_on) == ((("a", "int4"), ("b", "text")), ("u2",))
    assert (w.columns, w.depends_on) == ((("a", "int4"),), ("u9",))
    assert (index.on_id, index.key, index.depends_on) == ("u9", (1,), ("u9",))
    assert STATE.indexes_on("u9", "u1") == [index]


def test_dependents_are_transitive() -> None:
    assert [o.id for o in dependents(["u2"], STATE.objects)] == ["u9", "u10", "u11"]
    assert [o.id for o in dependents(["u10"], STATE.objects)] == []


def test_inlining_replaces_views_unless_kept() -> None:
    w = STATE.objects["u10"]
    assert w.plan is not None
    assert gets(w.plan) == ["u9"]
    assert gets(inline_views(w.plan, STATE.objects, lambda view: False)) == ["u2"]
    assert gets(inline_views(w.plan, STATE.objects, lambda view: view.id == "u9")) == ["u9"]


def test_a_definition_that_no_longer_plans_is_left_out() -> None:
    state = CatalogState(
        snapshot(
            ("u2", "t", "table", TABLE),
            (
                "u9",
                "v",
                "view",
                'CREATE VIEW "materialize"."public"."v" AS SELECT nope FROM "materialize"."public"."t"',
            ),
        )
    )
    assert "u9" not in state.objects
