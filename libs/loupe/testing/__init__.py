"""Test helpers shared by every package's tests: real servers, no mocks."""

from loupe.testing.eventually import assert_eventually

__all__ = ["assert_eventually"]
