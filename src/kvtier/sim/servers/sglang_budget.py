"""SGLang's token budget for one prefill batch, as `PrefillAdder` keeps it (v0.5.23).

`PrefillBudget` (mem_cache/prefill_budget.py) over a token pool: the free and evictable tokens
less `total_offset`, which starts at the running requests' remaining outputs
(`PrefillAdder._get_running_request_total_token_offset`: the tokens still to generate, at most
`CLIP_MAX_NEW_TOKENS`, whole for a fixed-length request) and grows by each admitted request's
`reserve` (its extend, one page, and its output when the prompt ends in this batch);
`current_offset` takes the extends and pages alone. A new request fits when its uncached prompt,
its output and one page are strictly below `remaining_total` (`check_prefill`); a batch stops
when either remainder reaches 0 (`has_capacity`). Page size 1: SGLang's default on CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass

# schedule_policy.CLIP_MAX_NEW_TOKENS (SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION, default 4096)
CLIP_MAX_NEW_TOKENS = 4096
# environ.SGLANG_RETRACT_DECODE_STEPS (default 20): free tokens release_req keeps for each request
# still running after a retraction
RETRACT_DECODE_STEPS = 20


@dataclass(slots=True)
class PrefillBudget:
    """`total_offset` and `current_offset` of the batch being formed, in tokens."""

    total_offset: float
    current_offset: int = 0

    def fits(self, room: float, extend: int, output: int) -> bool:
        """`check_prefill`: extend + output + one page < remaining_total, with `room` the free
        and evictable tokens (the request's matched prefix locked)."""
        clipped = output if output < CLIP_MAX_NEW_TOKENS else CLIP_MAX_NEW_TOKENS
        return extend + clipped + 1 < room - self.total_offset

    def reserve(self, extend: int, output: int) -> None:
        """`PrefillBudget.reserve` with one page of overhead; `output` 0 for a chunk that does
        not end the prompt."""
        clipped = output if output < CLIP_MAX_NEW_TOKENS else CLIP_MAX_NEW_TOKENS
        self.total_offset += extend + 1 + clipped
        self.current_offset += extend + 1

    def has_capacity(self, room: float) -> bool:
        """Both remainders positive."""
        return room - self.total_offset > 0 and room - self.current_offset > 0

    def chunk_room(self, room: float, chunk: int) -> int:
        """`available_chunk_tokens`: the continuing chunk, cut to the total remainder when that
        is positive (a chunk must make progress to release its KV)."""
        available = min(chunk, int(room - self.total_offset))
        return available if available > 0 else chunk
