"""The store's exceptions: a database that cannot do what was asked, a spent budget, and a
configuration another trial already holds."""

from __future__ import annotations

__all__ = ["BudgetSpent", "ConfigurationTaken", "StoreError"]


class StoreError(Exception):
    """The study database cannot do what was asked. str(e) is one line: the problem and the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class ConfigurationTaken(Exception):
    """A claim for a configuration that another trial of the study is running or has done."""


class BudgetSpent(Exception):
    """A trial was refused because the study's budget is spent (by this or another worker)."""
