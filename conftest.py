# Fixtures for every test: real servers (loupe.testing.fixtures) and every
# persist plugin (loupe.persist.testing: consensus_uri, consensus, blob, shard).
pytest_plugins = ["loupe.testing.fixtures", "loupe.persist.testing"]
