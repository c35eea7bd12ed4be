"""How builtin collections are grouped into Spark jobs (no Spark needed)."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

from loupe.builtins import (
    BUILTIN_COLLECTIONS,
    MZ_AUDIT_EVENTS,
    MZ_CLUSTERS,
    MZ_SESSION_HISTORY,
    BuiltinCollection,
)
from loupe.persist import DIFF_COLUMN
from loupe.storage.schema import ingest_type, plan_write_groups, shared_kind


def collection(cid: str, *columns: tuple[str, str]) -> BuiltinCollection:
    return BuiltinCollection(cid, "mz_internal", f"t_{cid}", columns, "catalog")


def test_every_builtin_collection_is_written_by_one_job() -> None:
    """A flush touching any builtin collections is one Spark job: their clashes
    (``id`` text and uint8) all share a column."""
    (group,) = plan_write_groups(BUILTIN_COLLECTIONS)
    assert len(group.collections) == len(BUILTIN_COLLECTIONS)
    assert dict(group.columns)["id"] == "text"


def test_a_flush_without_a_clash_writes_each_column_in_its_own_type() -> None:
    """Narrowed to collections that agree, ``id`` is not carried as text."""
    (group,) = plan_write_groups(BUILTIN_COLLECTIONS)
    assert dict(group.narrowed([MZ_AUDIT_EVENTS.id]).columns)["id"] == "uint8"
    both = group.narrowed([MZ_CLUSTERS.id, MZ_SESSION_HISTORY.id])
    assert [c.id for c in both.collections] == [MZ_CLUSTERS.id, MZ_SESSION_HISTORY.id]
    names = {name for name, _ in both.columns}
    assert names == set(MZ_CLUSTERS.column_names) | set(MZ_SESSION_HISTORY.column_names)
    assert dict(both.columns)["id"] == "text"
    assert group.narrowed([]).collections == ()


def test_the_wide_table_carries_a_clashing_integer_as_its_digits() -> None:
    """The job's ``id`` column holds the audit event's id as text, which casts back exactly."""
    (group,) = plan_write_groups(BUILTIN_COLLECTIONS)
    narrowed = group.narrowed([MZ_CLUSTERS.id, MZ_AUDIT_EVENTS.id])
    big = 2**63 - 1
    events = pa.table(
        {
            **{
                name: pa.nulls(1, ingest_type(kind))
                for name, kind in MZ_AUDIT_EVENTS.columns
                if name != "id"
            },
            "id": pa.array([big], pa.int64()),
            DIFF_COLUMN: pa.array([1], pa.int64()),
        }
    )
    wide = narrowed.wide_table({MZ_AUDIT_EVENTS.id: events}, timestamp=5)
    assert wide.schema.field("id").type == pa.string()
    assert wide.column("id").to_pylist() == [str(big)]
    assert wide.column("id").cast(pa.uint64()).to_pylist() == [big]


@pytest.mark.parametrize(
    ("kind", "other", "shared"),
    [
        ("uint8", "int8", "uint8"),  # Spark writes both as a long
        ("int4", "uint8", "int8"),
        ("uint8", "text", "text"),
        ("text", "int4", "text"),
        ("bool", "interval", None),
        ("text", "jsonb", "text"),
        ("uint8", "uuid", "text"),
        ("float8", "text", None),
        ("float8", "int8", None),
    ],
)
def test_which_column_types_can_share_a_column(kind: str, other: str, shared: str | None) -> None:
    assert shared_kind(kind, other) == shared


def test_any_builtin_collections_a_flush_writes_form_one_group() -> None:
    """Every pair, and every run of consecutive collections, narrows to one group
    (``narrowed`` relies on it): a type shared by many is shared by fewer."""
    (group,) = plan_write_groups(BUILTIN_COLLECTIONS)
    ids = [c.id for c in BUILTIN_COLLECTIONS]
    subsets = [[a, b] for a, b in itertools.combinations(ids, 2)]
    subsets += [ids[start:end] for start in range(len(ids)) for end in range(start + 1, len(ids))]
    for subset in subsets:
        narrowed = group.narrowed(subset)
        assert len(plan_write_groups(narrowed.collections)) == 1, subset
        kinds = dict(narrowed.columns)
        for member in narrowed.collections:
            for name, kind in member.columns:
                assert shared_kind(kinds[name], kind) is not None, (subset, name)


def test_collections_no_type_can_carry_go_to_another_group_in_any_order() -> None:
    """A bool and an interval of one name split; integers and text, in any order, do not."""
    a = collection("x1", ("v", "int4"))
    b = collection("x2", ("v", "int8"))
    c = collection("x3", ("v", "text"))
    d = collection("x4", ("v", "bool"))
    e = collection("x5", ("v", "interval"))
    u = collection("x6", ("v", "uuid"))
    for order in ([a, b, c], [c, b, a], [b, a], [a, c], [a, u], [u, b, c], [c, u, a]):
        assert len(plan_write_groups(order)) == 1
    groups = plan_write_groups([d, a, e])
    assert [[m.id for m in g.collections] for g in groups] == [["x4"], ["x1"], ["x5"]]
