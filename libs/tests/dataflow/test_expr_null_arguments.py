"""Functions given a NULL in a batch of one row: NULL, as PostgreSQL's strict functions give.

Found by the random queries: polars rejects a NULL replacement in a one-row
batch ("value cannot be 'null' in 'replace' expression") even in a branch
the NULL guard does not take, and the dataflow failed with XX000.
"""

from __future__ import annotations

import polars as pl
import pytest

from loupe.dataflow.expr import compile_scalar
from loupe.dataflow.types import polars_dtype
from loupe.plan.scalar import Call, Column, Literal, Scalar


def _one_row(expr: Scalar, text: str | None, other: str | None) -> object:
    frame = pl.DataFrame(
        {
            "c0": pl.Series([text], dtype=polars_dtype("text")),
            "c1": pl.Series([other], dtype=polars_dtype("text")),
        }
    )
    compiled = compile_scalar(expr, ["text", "text"])
    result = compiled.with_lets(frame.lazy()).with_columns(compiled.value.alias("v")).collect()
    return result["v"][0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((Literal("A_b", "text"), Literal("A_b", "text"), Column(1)), None),
        ((Column(0), Literal("b", "text"), Column(1)), None),
        ((Column(0), Column(1), Literal("x", "text")), None),
        ((Literal("A_b", "text"), Literal("A_b", "text"), Column(0)), "abc"),
    ],
)
def test_replace_with_a_null_argument_in_a_one_row_batch(
    args: tuple[Scalar, Scalar, Scalar], expected: str | None
) -> None:
    assert _one_row(Call("replace", args), "abc", None) == expected
