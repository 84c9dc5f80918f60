"""kvtier's per-model_type defaults table agrees with the transformers classes it cites.

transformers is a test dependency only (the `dev` extra): kvtier reads config.json without it.
"""

from __future__ import annotations

from typing import Any

import pytest
import transformers

from kvtier.model.config_defaults import TEXT_DEFAULTS, TEXT_MODEL_TYPE, VISION_DEFAULTS, Defaults

# table keys read with another model_type's class: the text section of an older Qwen2.5-VL file
# sits at its top level; Kimi's text config is built as a DeepseekV3Config
ALIASES = {"qwen2_5_vl": "qwen2_5_vl_text", "kimi_k2": "deepseek_v3"}


def _instance(defaults: Defaults) -> Any:
    module, _, name = defaults.source.partition(".")
    assert module == "transformers", defaults.source
    return getattr(transformers, name)()


@pytest.mark.parametrize("model_type", sorted(TEXT_DEFAULTS))
def test_text_defaults_match_transformers(model_type: str) -> None:
    defaults = TEXT_DEFAULTS[model_type]
    config = _instance(defaults)
    assert config.model_type == ALIASES.get(model_type, model_type)
    for field, value in defaults.fields.items():
        if field == "sliding_window_pattern":
            # the class states the pattern as its default per-layer list
            n = config.num_hidden_layers
            full = [i for i, kind in enumerate(config.layer_types) if kind == "full_attention"]
            assert full == [i for i in range(n) if (i + 1) % value == 0], field
        elif getattr(config, "is_heterogeneous", False) and field in ("head_dim",):
            # Gemma 4 states its shapes per layer: the base value is a sliding layer's (layer 0)
            assert config.layer_types[0] == "sliding_attention"
            assert getattr(config.per_layer_config[0], field) == value, field
        else:
            assert getattr(config, field) == value, field


@pytest.mark.parametrize(
    "arch", sorted(a for a, d in VISION_DEFAULTS.items() if d.source.startswith("transformers."))
)
def test_vision_defaults_match_transformers(arch: str) -> None:
    defaults = VISION_DEFAULTS[arch]
    config = _instance(defaults)
    for field, value in defaults.fields.items():
        assert getattr(config, field) == value, field


def test_kimi_vision_defaults_are_vllms() -> None:
    # vLLM's KimiK25VisionConfig is not in transformers: its defaults are the published tower's
    kimi = VISION_DEFAULTS["KimiK25ForConditionalGeneration"]
    assert kimi.source.startswith("vllm.")
    assert (kimi.fields["hidden_size"], kimi.fields["num_hidden_layers"]) == (1152, 27)


def test_wrappers_name_a_known_text_model_type() -> None:
    assert set(TEXT_MODEL_TYPE.values()) <= set(TEXT_DEFAULTS)
