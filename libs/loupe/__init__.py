"""Loupe: a replicated, incremental compute service you can look into with SQL."""

__version__ = "0.1.0"
__all__ = ["__version__"]
