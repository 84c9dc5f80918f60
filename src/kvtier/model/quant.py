"""Weight quantization from a Hugging Face `quantization_config`: format and quantized layers.

Bits per weight and scale overheads are the checkpoint's storage formats:
- fp8 (`quant_method: fp8`): 1 B/weight; block-wise checkpoints (`weight_block_size`, DeepSeek-V3)
  add one fp32 `weight_scale_inv` per block, per-tensor checkpoints one scalar.
- compressed-tensors: the `config_groups` weight scheme (int4 group-wise with bf16 scales, fp8
  per channel or per tensor), applied to the modules its `targets` name and its `ignore` spares.
- AWQ / GPTQ: int4 (or int8 for GPTQ) with an fp16 scale and a packed zero point per group.
- mxfp4 (gpt-oss): 4-bit e2m1 with one e8m0 scale per 32 weights, MoE experts only.
- nvfp4 (ModelOpt `quant_algo: NVFP4`): 4-bit e2m1 with one fp8 scale per 16 weights plus a
  per-tensor fp32 global scale (negligible, not counted). ModelOpt's exclusions are wildcards
  (`model.layers.0.self_attn*`) or name fragments, matched as vLLM matches them
  (ModelOptQuantConfigBase.is_layer_excluded: substring, then fnmatch; v0.20.0 - v0.21.0).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase
from typing import Any

from kvtier.errors import UnsupportedModel
from kvtier.model.description import Quantization

# Decides whether one module (HF name, is it an nn.Linear) is stored quantized.
ModuleFilter = Callable[[str, bool], bool]

# Layers the engines never quantize whatever the config says: embeddings, norms, the MoE router
# of DeepSeek-style models (a custom gate module, not nn.Linear).
_NEVER = re.compile(r"(^|\.)(embed_tokens|norm|.*_norm|.*layernorm)$")


def parse_quantization(
    qcfg: Mapping[str, Any] | None, hidden_size: int
) -> tuple[Quantization | None, ModuleFilter]:
    """The weight format of a checkpoint and a predicate naming the modules stored in it.

    `hidden_size` stands in for a layer's input width where a format keeps one scale per output
    channel (its share of the bytes is below 0.1%). Unknown methods or schemes raise
    UnsupportedModel naming the field.
    """
    if not qcfg:
        return None, _nothing
    method = str(qcfg.get("quant_method", "")).lower()
    if not method and isinstance(qcfg.get("quantization"), Mapping):
        method = "modelopt"  # a ModelOpt hf_quant_config.json: {"producer", "quantization"}
    if method == "fp8":
        return _fp8(qcfg)
    if method == "compressed-tensors":
        return _compressed_tensors(qcfg, hidden_size)
    if method in ("awq", "gptq"):
        return _awq_gptq(qcfg, method)
    if method == "mxfp4":
        # gpt-oss ships only the MoE expert weights in mxfp4; attention, router and head stay bf16
        return Quantization("mxfp4", 4, 32, 8), _experts_only
    if method == "modelopt":
        return _modelopt(qcfg)
    raise UnsupportedModel(f"unsupported quantization_config.quant_method {method!r}")


def _nothing(name: str, is_linear: bool) -> bool:
    return False


def _experts_only(name: str, is_linear: bool) -> bool:
    return ".experts" in name


def _linear_except(skip: list[str]) -> ModuleFilter:
    """Every decoder nn.Linear but lm_head and the modules whose names contain an entry of skip."""

    def keep(name: str, is_linear: bool) -> bool:
        if not is_linear or name == "lm_head" or _NEVER.search(name):
            return False
        return not any(_glob_match(s, name) for s in skip)

    return keep


def _modelopt_except(skip: list[str]) -> ModuleFilter:
    """Every decoder nn.Linear but lm_head and the modules a ModelOpt exclusion names."""

    def keep(name: str, is_linear: bool) -> bool:
        if not is_linear or name == "lm_head" or _NEVER.search(name):
            return False
        return not any(s in name or fnmatchcase(name, s) for s in skip)

    return keep


def _glob_match(pattern: str, name: str) -> bool:
    # modules_to_not_convert entries are name fragments, sometimes with `*` for the layer index
    rx = re.escape(pattern).replace(r"\*", r"[^.]+")
    return re.search(rf"(^|\.){rx}($|\.)", name) is not None


def _fp8(qcfg: Mapping[str, Any]) -> tuple[Quantization, ModuleFilter]:
    block = qcfg.get("weight_block_size")
    skip = list(qcfg.get("ignored_layers") or qcfg.get("modules_to_not_convert") or [])
    if block:
        if len(block) != 2:
            raise UnsupportedModel(f"unsupported quantization_config.weight_block_size {block!r}")
        return Quantization("fp8", 8, int(block[0]) * int(block[1]), 32), _linear_except(skip)
    return Quantization("fp8", 8), _linear_except(skip)


def _awq_gptq(qcfg: Mapping[str, Any], method: str) -> tuple[Quantization, ModuleFilter]:
    bits = int(qcfg.get("bits", qcfg.get("w_bit", 0)))
    group = int(qcfg.get("group_size", qcfg.get("q_group_size", 0)))
    if bits not in ((4,) if method == "awq" else (4, 8)):
        raise UnsupportedModel(f"unsupported quantization_config.bits {bits} for {method}")
    if group <= 0:
        raise UnsupportedModel(f"unsupported quantization_config.group_size {group} for {method}")
    skip = list(qcfg.get("modules_to_not_convert") or [])
    # fp16 scale plus a zero point packed at the weight width, per group
    return Quantization(method, bits, group, 16 + bits), _linear_except(skip)


def _modelopt(qcfg: Mapping[str, Any]) -> tuple[Quantization, ModuleFilter]:
    inner = qcfg.get("quantization", qcfg)
    algo = str(inner.get("quant_algo", "")).upper()
    skip = list(inner.get("exclude_modules") or qcfg.get("ignore") or [])
    if algo == "NVFP4":
        group = int(inner.get("group_size", 16))
        return Quantization("nvfp4", 4, group, 8), _modelopt_except(skip)
    if algo == "FP8":
        return Quantization("fp8", 8), _modelopt_except(skip)
    raise UnsupportedModel(f"unsupported quantization_config.quant_algo {algo!r}")


def kv_cache_quant_algo(qcfg: Mapping[str, Any] | None) -> str | None:
    """The KV format a ModelOpt checkpoint states (`kv_cache_scheme` or `kv_cache_quant_algo`,
    at the top or under `quantization`), lowercased; a scheme given as a dict reads as "fp8"
    (8-bit float, static) or "nvfp4" (4-bit float), else "unknown". None for other methods or
    when none is stated (vllm/utils/torch_utils.py get_kv_cache_quant_algo_string, v0.19.0 -
    v0.21.0)."""
    if not qcfg:
        return None
    inner = qcfg.get("quantization", qcfg)
    method = str(qcfg.get("quant_method", "") or ("modelopt" if inner is not qcfg else ""))
    if not method.startswith("modelopt") or not isinstance(inner, Mapping):
        return None
    algo = (
        inner.get("kv_cache_scheme")
        or qcfg.get("kv_cache_scheme")
        or inner.get("kv_cache_quant_algo")
        or qcfg.get("kv_cache_quant_algo")
    )
    if isinstance(algo, Mapping):
        if algo.get("type") == "float" and algo.get("num_bits") == 8 and not algo.get("dynamic", 1):
            return "fp8"
        if algo.get("type") == "float" and algo.get("num_bits") == 4:
            return "nvfp4"
        return "unknown"
    return algo.lower() if isinstance(algo, str) else None


def _compressed_tensors(
    qcfg: Mapping[str, Any], hidden_size: int
) -> tuple[Quantization, ModuleFilter]:
    groups = qcfg.get("config_groups") or {}
    if len(groups) != 1:
        raise UnsupportedModel(
            f"unsupported quantization_config.config_groups: {len(groups)} groups "
            "(one weight scheme per checkpoint is understood)"
        )
    (scheme,) = groups.values()
    weights = scheme.get("weights") or {}
    bits = int(weights.get("num_bits", 0))
    kind = str(weights.get("type", "int"))
    strategy = str(weights.get("strategy", "tensor"))
    symmetric = bool(weights.get("symmetric", True))
    if kind == "float" and bits == 8:
        method = "fp8"
    elif kind == "float" and bits == 4 and strategy == "tensor_group":
        method = "nvfp4"
    elif kind == "int" and bits in (4, 8):
        method = f"int{bits}"
    else:
        raise UnsupportedModel(
            f"unsupported compressed-tensors weights type {kind!r} with num_bits {bits}"
        )
    zero_bits = 0 if symmetric else bits
    if method == "nvfp4":
        # e2m1 weights, an fp8 scale per group of 16, one fp32 global scale per tensor
        quant = Quantization(method, 4, int(weights.get("group_size") or 16), 8)
    elif strategy == "group":
        group = int(weights.get("group_size") or 0)
        if group <= 0:
            raise UnsupportedModel(f"unsupported compressed-tensors group_size {group!r}")
        # bf16 scale per group (the format's scale dtype follows the model dtype)
        quant = Quantization(method, bits, group, 16 + zero_bits)
    elif strategy == "channel":
        quant = Quantization(method, bits, hidden_size, 32 + zero_bits)
    elif strategy == "block":
        block = weights.get("block_structure") or [128, 128]
        quant = Quantization(method, bits, int(block[0]) * int(block[1]), 32)
    elif strategy == "tensor":
        quant = Quantization(method, bits)
    else:
        raise UnsupportedModel(f"unsupported compressed-tensors strategy {strategy!r}")
    targets = list(scheme.get("targets") or ["Linear"])
    ignore = list(qcfg.get("ignore") or [])
    return quant, _targeted(targets, ignore)


def _targeted(targets: list[str], ignore: list[str]) -> ModuleFilter:
    """compressed-tensors matching: a target or ignore entry is a class name (`Linear`), an exact
    module name, or `re:` followed by a regular expression matched from the start of the name."""

    def matches(entry: str, name: str, is_linear: bool) -> bool:
        if entry.startswith("re:"):
            return re.match(entry[3:], name) is not None
        if entry == "Linear":
            return is_linear
        return name == entry or name.endswith("." + entry) or entry.endswith("." + name)

    def keep(name: str, is_linear: bool) -> bool:
        if _NEVER.search(name):
            return False
        if not any(matches(t, name, is_linear) for t in targets):
            return False
        return not any(matches(i, name, is_linear) for i in ignore)

    return keep
