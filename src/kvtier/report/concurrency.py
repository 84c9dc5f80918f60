"""How many requests run at once, one rule for the terminal and the HTML report.

A ledger's concurrency is KV tokens / context (a fraction); a server runs whole requests, and never
more than max_running_requests.
"""

from __future__ import annotations

import math

WHOLE_REQUESTS_RULE = "whole requests (floor of KV tokens / context)"


def whole_requests(requests: float, max_running_requests: int | None) -> int:
    """Requests that run at once: whole ones, at most `max_running_requests` where it is known."""
    whole = math.floor(requests)
    return min(whole, max_running_requests) if max_running_requests else whole


def requests_caption(max_running_requests: int | None) -> str:
    """The rule in words, with the cap where it is known."""
    cap = (
        f", at most max_running_requests = {max_running_requests:,}" if max_running_requests else ""
    )
    return f"requests at once: {WHOLE_REQUESTS_RULE}{cap}"
