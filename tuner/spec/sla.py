"""The service-level targets a study's levels are judged against."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SLA:
    """Service-level targets; None means no target."""

    ttft_p90_ms: float | None = None
    # The per-user decode speed that 90% of requests reach or beat (the 10th percentile).
    min_tok_s_per_user_p90: float | None = None

    def is_empty(self) -> bool:
        """No target at all: every level meets it."""
        return self.ttft_p90_ms is None and self.min_tok_s_per_user_p90 is None
