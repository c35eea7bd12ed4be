"""sqllogictest on a live Loupe: a sample of the corpus, compared with PostgreSQL's own run.

Every record PostgreSQL passes must pass on Loupe too (the corpus has
records in other dialects that PostgreSQL fails as well). ``make slt`` runs
the whole corpus; this sample keeps CI within its time.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loupe.slt import parse_script, run_script
from loupe.slt.__main__ import DEFAULT_DIR
from loupe.slt.targets import LoupeTarget, PostgresTarget
from loupe.testing.system import LoupeUp

pytestmark = pytest.mark.e2e

CORPUS = Path(os.environ.get("LOUPE_SLT_DIR", DEFAULT_DIR))
# (script, records to run, modes)
SAMPLE = [
    ("select1.test", 150, ("oneshot",)),
    ("select1.test", 40, ("views",)),
    ("select2.test", 150, ("oneshot",)),
    ("select3.test", 100, ("oneshot",)),
    ("select4.test", 100, ("oneshot",)),
    ("select5.test", 60, ("oneshot",)),
    ("evidence/in1.test", None, ("oneshot",)),
    ("evidence/in2.test", None, ("oneshot",)),
    ("evidence/slt_lang_aggfunc.test", None, ("oneshot",)),
    ("evidence/slt_lang_createview.test", None, ("oneshot",)),
    ("evidence/slt_lang_dropview.test", None, ("oneshot",)),
    ("evidence/slt_lang_update.test", None, ("oneshot",)),
    ("random/expr/slt_good_0.test", 150, ("oneshot",)),
    ("random/select/slt_good_0.test", 150, ("oneshot",)),
    ("random/select/slt_good_0.test", 40, ("views",)),
    ("random/aggregates/slt_good_0.test", 75, ("oneshot",)),
    ("random/groupby/slt_good_1.test", 120, ("oneshot",)),
    # PRIMARY KEY tables, CREATE [UNIQUE] INDEX, DELETE.
    ("index/between/10/slt_good_1.test", 80, ("oneshot",)),
    ("index/delete/10/slt_good_0.test", 80, ("oneshot",)),
]


@pytest.fixture(scope="module")
def loupe(tmp_path_factory):
    if not CORPUS.is_dir():
        pytest.skip(f"no sqllogictest corpus at {CORPUS} (set LOUPE_SLT_DIR)")
    system = LoupeUp(tmp_path_factory.mktemp("slt") / "data")
    system.start()
    target = LoupeTarget("127.0.0.1", system.sql_port)
    yield target
    target.close()
    system.stop()


@pytest.fixture(scope="module")
def postgres(postgres_url):
    target = PostgresTarget(postgres_url)
    yield target
    target.close()


@pytest.mark.parametrize(
    ("name", "limit", "mode"),
    [(name, limit, mode) for name, limit, modes in SAMPLE for mode in modes],
    ids=[f"{name}-{mode}-{limit}" for name, limit, modes in SAMPLE for mode in modes],
)
def test_loupe_passes_what_postgres_passes(loupe, postgres, name, limit, mode):
    """No record fails on Loupe that PostgreSQL passes, one-shot and as maintained views."""
    script = parse_script(CORPUS / name)
    theirs = run_script(postgres, script, mode=mode, max_records=limit)
    ours = run_script(loupe, script, mode=mode, max_records=limit)
    print(
        f"{name} {mode}: loupe {ours.passed}/{ours.records} ({ours.per_second:.0f} rec/s),"
        f" postgresql {theirs.passed}/{theirs.records}"
    )
    assert ours.records == theirs.records > 0
    postgres_failed = {f.line for f in theirs.failures}
    only_ours = [f for f in ours.failures if f.line not in postgres_failed]
    assert not only_ours, "\n".join(
        f"line {f.line}: {' '.join(f.sql.split())[:120]}\n  {f.reason[:300]}"
        for f in only_ours[:10]
    )
    if mode == "views":
        # Most queries of these scripts are views Loupe maintains, not one-shot fallbacks.
        assert ours.not_views <= ours.queries // 2
