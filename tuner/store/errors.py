"""The store's two exceptions: a database that cannot do what was asked, and a spent budget."""

from __future__ import annotations

__all__ = ["BudgetSpent", "StoreError"]


class StoreError(Exception):
    """The study database cannot do what was asked. str(e) is one line: the problem and the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class BudgetSpent(Exception):
    """A trial was refused because the study's budget is spent (by this or another worker)."""
