"""One linear-attention layer's recurrent state on one rank, as both engines shard it (SGLang
Mamba2StateShape, vLLM MambaStateShapeCalculator): the conv channels (value heads x value dim +
2 x key-head groups x key dim) and the value heads each divide over tp."""

from __future__ import annotations

from kvtier.errors import KvtierError
from kvtier.model.description import LinearAttention


def rank_elements(
    state: LinearAttention, tp: int, groups: int, name: str, refusal: str = ""
) -> tuple[int, int]:
    """(conv, SSM) state elements of one layer on one rank with `groups` key-head groups (each
    engine widens them its own way); a count tp does not divide is refused as `name`'s state,
    `refusal` appended."""
    conv_dim = state.num_value_heads * state.value_head_dim + 2 * groups * state.key_head_dim
    if conv_dim % tp or state.num_value_heads % tp:
        raise KvtierError(
            f"{name} state of {conv_dim} conv channels and {state.num_value_heads} value heads "
            f"does not divide over tp {tp}{refusal}"
        )
    conv = conv_dim // tp * (state.conv_kernel - 1)
    return conv, state.num_value_heads // tp * state.value_head_dim * state.key_head_dim
