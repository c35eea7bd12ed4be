"""Session variables and superusers."""

from __future__ import annotations

import pytest

from loupe.common.errors import LoupeError
from loupe.coordinator.session import SessionManager


def test_defaults_and_the_embedded_superuser() -> None:
    """The default user is materialize, a superuser, on cluster quickstart."""
    session = SessionManager().open()
    assert session.user == "materialize"
    assert session.is_superuser
    assert session.get("cluster") == "quickstart"
    assert session.get("database") == "materialize"
    assert session.get("search_path") == "public"
    assert session.get("transaction_isolation") == "strict serializable"
    assert session.get("cluster_replica") == ""
    assert session.get("is_superuser") == "on"


def test_superusers_come_from_the_setting() -> None:
    """Only users named in the superusers setting are superusers."""
    manager = SessionManager("admin, mz_system")
    assert manager.open("admin").is_superuser
    assert not manager.open("materialize").is_superuser
    assert manager.open("bob").get("is_superuser") == "off"


def test_set_reset_and_case_insensitive_names() -> None:
    """SET changes a variable, RESET restores its default."""
    session = SessionManager().open()
    session.set("CLUSTER", "c")
    assert session.get("cluster") == "c"
    session.reset("cluster")
    assert session.get("cluster") == "quickstart"
    session.set("application_name", "x")
    session.reset("all")
    assert session.get("application_name") == ""


def test_unknown_variable_is_42704() -> None:
    """An unknown variable says which."""
    session = SessionManager().open()
    with pytest.raises(LoupeError) as caught:
        session.set("x", "1", position=5)
    assert (caught.value.code, caught.value.message, caught.value.position) == (
        "42704",
        'unrecognized configuration parameter "x"',
        5,
    )
    with pytest.raises(LoupeError):
        session.get("nope")


def test_read_only_and_checked_variables() -> None:
    """Read-only variables accept only their value; isolation levels are checked."""
    session = SessionManager().open()
    session.set("client_encoding", "utf8")
    with pytest.raises(LoupeError) as caught:
        session.set("client_encoding", "latin1")
    assert caught.value.code == "55P02"
    session.set("transaction_isolation", "SERIALIZABLE")
    assert session.get("transaction_isolation") == "serializable"
    with pytest.raises(LoupeError) as caught:
        session.set("transaction_isolation", "read committed")
    assert caught.value.code == "22023"


def test_open_with_bad_option_is_refused() -> None:
    """Initial options are checked like SET."""
    manager = SessionManager()
    with pytest.raises(LoupeError):
        manager.open(options={"bogus": "1"})
    assert len(manager) == 0
    session = manager.open(options={"cluster": "c"}, application_name="app")
    assert (session.cluster, session.get("application_name")) == ("c", "app")
