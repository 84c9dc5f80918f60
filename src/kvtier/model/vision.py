"""Parameter count of the vision encoder + projector of multimodal wrappers.

Each family is a pre-norm ViT (fused or separate q/k/v/o with biases, two-matrix GELU MLP, two
LayerNorms with bias per block) plus its own patch/position embeddings and projector into the
text model's hidden size. The tower is small next to the decoder and is counted whole on every
rank: SGLang's Kimi-K2.5 load at TP8 (72.33 GiB per GPU) matches that within 0.5 GiB, where
TP-sharding its blocks would leave 1.2 GiB unexplained.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvtier.errors import UnsupportedModel


def _vit_blocks(layers: int, h: int, inter: int) -> int:
    attn = 4 * h * h + 4 * h
    mlp = 2 * h * inter + inter + h
    return layers * (attn + mlp + 4 * h)


def vision_params(arch: str, vision: Mapping[str, Any], text_hidden: int) -> int:
    """Parameters of the vision tower and projector of `arch`, from its `vision_config` read over
    the architecture's defaults (`published.vision_section`)."""
    if arch == "Qwen2_5_VLForConditionalGeneration":
        return _qwen2_5_vl(vision)
    if arch in (
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
    ):
        return _qwen3_vl(vision)
    h = int(vision["hidden_size"])
    layers = int(vision["num_hidden_layers"])
    inter = int(vision["intermediate_size"])
    patch = int(vision["patch_size"])
    channels = int(vision.get("num_channels", 3))
    embed = channels * patch * patch * h + h
    blocks = _vit_blocks(layers, h, inter)
    if arch == "KimiK25ForConditionalGeneration":
        # MoonViT: learned 2-D position grid, final LayerNorm, then a patch merger that folds a
        # merge_kernel of tokens into one (LayerNorm + two linear layers with bias)
        grid = int(vision["init_pos_emb_height"]) * int(vision["init_pos_emb_width"])
        merged = h * _prod(vision.get("merge_kernel_size", [2, 2]))
        projector = 2 * h + merged * merged + merged + merged * text_hidden + text_hidden
        return embed + grid * h + blocks + 2 * h + projector
    if arch == "Gemma3ForConditionalGeneration":
        # SigLIP: one learned position per patch, post LayerNorm; projector = RMSNorm + matrix
        positions = (int(vision["image_size"]) // patch) ** 2
        return embed + positions * h + blocks + 2 * h + h + h * text_hidden
    if arch == "Llama4ForConditionalGeneration":
        # CLIP-style: class token, one position per patch (+1), pre/post LayerNorm, a pixel-shuffle
        # adapter MLP, then the projector into the text model
        positions = (int(vision["image_size"]) // patch) ** 2 + 1
        shuffled = int(h / float(vision.get("pixel_shuffle_ratio", 0.5)) ** 2)
        adapter_in = int(vision.get("projector_input_dim", 4096))
        adapter_out = int(vision.get("projector_output_dim", 4096))
        out = int(vision.get("vision_output_dim", adapter_out))
        adapter = shuffled * adapter_in + adapter_in * adapter_out
        return (embed - h) + h + positions * h + blocks + 4 * h + adapter + out * text_hidden
    raise UnsupportedModel(f"unsupported vision tower of architecture {arch!r}")


def _qwen2_5_vl(vision: Mapping[str, Any]) -> int:
    # Qwen2.5-VL ViT: a Conv3d patch embedding without bias over temporal x spatial patches;
    # blocks of RMSNorm, fused qkv + proj with biases and a SwiGLU MLP with biases; a merger
    # that folds spatial_merge_size^2 patches (RMSNorm, then two linear layers with bias)
    h = int(vision["hidden_size"])
    inter = int(vision["intermediate_size"])
    patch = int(vision["patch_size"])
    embed = int(vision["in_channels"]) * int(vision["temporal_patch_size"]) * patch * patch * h
    block = 4 * h * h + 4 * h + 3 * h * inter + 2 * inter + h + 2 * h
    merged = h * int(vision["spatial_merge_size"]) ** 2
    out = int(vision["out_hidden_size"])
    merger = h + merged * merged + merged + merged * out + out
    return embed + int(vision["depth"]) * block + merger


def _qwen3_vl(vision: Mapping[str, Any]) -> int:
    # Qwen3-VL ViT (Qwen3.5 / 3.6 reuse it): a Conv3d patch embedding with bias, learned
    # positions, pre-norm LayerNorm blocks (fused qkv + proj with biases, two-matrix GELU MLP
    # with biases), a merger folding spatial_merge_size^2 patches (LayerNorm over the hidden size,
    # two linear layers with bias), and one more merger (LayerNorm after the fold) per
    # deepstack_visual_indexes entry
    h = int(vision["hidden_size"])
    patch = int(vision["patch_size"])
    embed = int(vision["in_channels"]) * int(vision["temporal_patch_size"]) * patch * patch * h + h
    positions = int(vision["num_position_embeddings"]) * h
    blocks = _vit_blocks(int(vision["depth"]), h, int(vision["intermediate_size"]))
    merged = h * int(vision["spatial_merge_size"]) ** 2
    out = int(vision["out_hidden_size"])
    fold = merged * merged + merged + merged * out + out
    deepstack = len(vision.get("deepstack_visual_indexes") or [])
    return embed + positions + blocks + 2 * h + fold + deepstack * (2 * merged + fold)


def _prod(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out
