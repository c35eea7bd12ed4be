# Fixtures for every test: real servers (loupe.testing.fixtures) and every
# persist plugin (loupe.persist.testing: consensus_uri, consensus, blob, shard).
pytest_plugins = ["loupe.testing.fixtures", "loupe.persist.testing"]


import pytest  # noqa: E402


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that ran on a whole system (a ``LoupeUp`` fixture) reports the
    tails of its processes' logs: CI keeps nothing else of them."""
    from loupe.testing.system import LoupeUp

    report = yield
    if report.failed:
        for value in getattr(item, "funcargs", {}).values():
            if isinstance(value, LoupeUp):
                report.sections.append(("loupe up logs", value.log_tails()))
    return report
