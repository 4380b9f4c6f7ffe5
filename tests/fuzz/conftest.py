"""Fixtures of the fuzz tests."""

from tests.fuzz.harness import small_budget

__all__ = ["small_budget"]
