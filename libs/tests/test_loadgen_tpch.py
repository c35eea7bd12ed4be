"""The TPC-H load generator: tables at a scale factor in Loupe's types, loaded into shards."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from loupe.loadgen import tpch
from loupe.persist import LocalBlob, Shard, SqliteConsensus, expand
from loupe.persist.shard import UpperMismatch

SCALE = 0.01


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pa.Table]:
    return tpch.generate(SCALE, tmp_path_factory.mktemp("tpch"))


def shards_for(root: Path, names) -> dict[str, Shard]:
    blob, consensus = LocalBlob(root / "blob"), SqliteConsensus(root / "consensus.sqlite")
    return {name: Shard(f"tpch_{name}", blob, consensus) for name in names}


def test_fixed_size_tables_have_the_spec_cardinalities(tables):
    """TPC-H §4.2.5: row counts are fixed multiples of the scale factor."""
    expected = {
        "region": 5,
        "nation": 25,
        "supplier": 10_000 * SCALE,
        "customer": 150_000 * SCALE,
        "part": 200_000 * SCALE,
        "partsupp": 800_000 * SCALE,
        "orders": 1_500_000 * SCALE,
    }
    assert {name: tables[name].num_rows for name in expected} == expected


def test_every_order_has_one_to_seven_lineitems(tables):
    """Lineitem's size is random, but each order holds 1 to 7 lines and no line is orphaned."""
    lines = pl.from_arrow(tables["lineitem"]).group_by("l_orderkey").len()
    orders = set(tables["orders"].column("o_orderkey").to_pylist())
    assert set(lines["l_orderkey"].to_list()) == orders
    assert lines["len"].min() >= 1
    assert lines["len"].max() <= 7


def test_columns_have_loupes_types(tables):
    """Keys int8, money decimal(15,2) (numeric), dates date32, strings plain text."""
    lineitem = tables["lineitem"].schema
    assert lineitem.field("l_orderkey").type == pa.int64()
    assert lineitem.field("l_linenumber").type == pa.int32()
    assert lineitem.field("l_discount").type == pa.decimal128(15, 2)
    assert lineitem.field("l_shipdate").type == pa.date32()
    assert lineitem.field("l_returnflag").type == pa.string()
    for name, table in tables.items():
        assert table.schema.names == [column for column, _ in tpch.TPCH_TABLES[name]]


def test_values_are_in_the_spec_ranges(tables):
    """Spot checks of §4.2.3: discounts 0.00 to 0.10, ship dates 1992-01-02 to 1998-12-01."""
    lineitem = pl.from_arrow(tables["lineitem"])
    assert lineitem["l_discount"].min() == decimal.Decimal("0.00")
    assert lineitem["l_discount"].max() == decimal.Decimal("0.10")
    assert lineitem["l_shipdate"].min() >= dt.date(1992, 1, 2)
    assert lineitem["l_shipdate"].max() <= dt.date(1998, 12, 1)
    assert set(lineitem["l_returnflag"].unique()) == {"A", "N", "R"}


def test_unknown_tables_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not TPC-H tables: lineorder"):
        tpch.generate(SCALE, tmp_path, ["orders", "lineorder"])


def test_load_inserts_every_row_at_the_timestamp(tables, tmp_path):
    """A loaded shard's snapshot at ts is the table, numeric as persist's decimal."""
    chosen = {name: tables[name] for name in ("orders", "nation")}
    states = tpch.load(chosen, shards_for(tmp_path, chosen), 7)
    for name, table in chosen.items():
        assert states[name].upper == 8
        assert states[name].columns == list(tpch.TPCH_TABLES[name])
        shard = shards_for(tmp_path, [name])[name]
        with pytest.raises(ValueError, match="not complete"):
            shard.snapshot(8)
        stored = pl.from_arrow(expand(shard.snapshot(7)))
        original = pl.from_arrow(table)
        key = table.schema.names[0]
        if name == "orders":
            assert stored["o_totalprice"].dtype == pl.Decimal(38, 16)
            stored = stored.with_columns(pl.col("o_totalprice").cast(pl.Decimal(15, 2)))
        assert stored.sort(key).equals(original.sort(key))


def test_load_reports_progress_part_by_part(tables, tmp_path):
    """Progress counts rows per table up to its size, one report per part written."""
    reports: list[tuple[str, int, int]] = []
    chosen = {"lineitem": tables["lineitem"], "region": tables["region"]}
    shards = shards_for(tmp_path, chosen)
    tpch.load(chosen, shards, 1, progress=lambda *r: reports.append(r), rows_per_part=20_000)
    lines = tables["lineitem"].num_rows
    assert [r for r in reports if r[0] == "lineitem"] == [
        ("lineitem", written, lines) for written in [0, 20_000, 40_000, 60_000, lines]
    ]
    assert [r for r in reports if r[0] == "region"] == [("region", 0, 5), ("region", 5, 5)]
    assert len(shards["lineitem"].state().parts) == 4


def test_load_files_streams_the_same_rows_part_by_part(tables, tmp_path):
    """Loading from the Parquet files, a part at a time, stores what loading the table does."""
    files = tpch.generate_files(SCALE, tmp_path / "gen", ["orders"])
    reports: list[tuple[str, int, int]] = []
    shards = shards_for(tmp_path, ["orders"])
    tpch.load_files(files, shards, 3, progress=lambda *r: reports.append(r), rows_per_part=4_000)
    assert [written for _, written, _ in reports] == [0, 4_000, 8_000, 12_000, 15_000]
    assert len(shards["orders"].state().parts) == 4
    stored = pl.from_arrow(expand(shards["orders"].snapshot(3)))
    reference = tpch.storage_updates(tables["orders"], tpch.TPCH_TABLES["orders"], 3)
    expected = pl.from_arrow(reference.drop_columns(["mz_timestamp", "mz_diff"]))
    assert stored.sort("o_orderkey").equals(expected.sort("o_orderkey"))


def test_load_refuses_a_shard_already_past_the_timestamp(tables, tmp_path):
    """Loading at a time a shard has already sealed would rewrite history."""
    shards = shards_for(tmp_path, ["region"])
    tpch.load({"region": tables["region"]}, shards, 5)
    with pytest.raises(ValueError, match="already complete past 3"):
        tpch.load({"region": tables["region"]}, shards, 3)
    assert expand(shards["region"].snapshot()).num_rows == 5


def test_the_command_line_loads_a_location(tmp_path, capsys):
    """``python -m loupe.loadgen.tpch`` fills shards named tpch_<table> and prints progress."""
    tpch.main(
        [
            "--scale",
            str(SCALE),
            "--tables",
            "region,nation",
            "--blob",
            f"file://{tmp_path / 'blob'}",
            "--consensus",
            f"sqlite://{tmp_path / 'consensus.sqlite'}",
            "--workdir",
            str(tmp_path / "work"),
        ]
    )
    shard = shards_for(tmp_path, ["nation"])["nation"]
    assert expand(shard.snapshot(1)).num_rows == 25
    assert "nation" in capsys.readouterr().err


def test_load_survives_a_tick_that_moves_the_upper_meanwhile(tables, tmp_path):
    """An empty append (a tick) while the parts are written does not fail the load.

    The coordinator's ticker advances every table's upper without the write
    lock; the load appends its parts at ``ts`` as long as the upper is still
    at most ``ts``, and refuses once another writer is past it.
    """
    region = {"region": tables["region"]}

    def tick_to(root: Path, upper: int):
        ticker = shards_for(root, region)["region"]  # another writer, same shard

        def progress(table: str, written: int, total: int) -> None:
            if written == total:  # the parts are written, the append is next
                state = ticker.ensure(tpch.TPCH_TABLES["region"])
                ticker.compare_and_append(None, state.upper, upper)

        return progress

    shards = shards_for(tmp_path, region)
    states = tpch.load(region, shards, 7, progress=tick_to(tmp_path, 5))
    assert states["region"].upper == 8
    assert expand(shards["region"].snapshot(7)).num_rows == 5

    past = tmp_path / "past"
    with pytest.raises(UpperMismatch):
        tpch.load(region, shards_for(past, region), 7, progress=tick_to(past, 9))
