"""Catalog storage backends (``loupe.catalog_backends`` plugins)."""
