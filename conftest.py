pytest_plugins = ["loupe.testing.fixtures"]
