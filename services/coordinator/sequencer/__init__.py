"""Statements sequenced by family: one module per kind of statement.

(Filled in as the families move out of ``coordinator.py``.)
"""
