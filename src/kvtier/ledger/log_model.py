"""Which model a startup log served: from `--model`, from the log's own arguments, or its class."""

from __future__ import annotations

from kvtier.engines.sglang.log import SGLangStartup
from kvtier.engines.vllm.log import VllmStartup
from kvtier.errors import KvtierError
from kvtier.logs.facts import Fact, stated
from kvtier.logs.records import Args
from kvtier.spec.catalog import model_for_architecture, resolve_model
from kvtier.spec.model import ModelSpec

# Argument names that carry the model path, SGLang first, then vLLM.
_MODEL_KEYS = ("model_path", "model")


def identify_model(
    startup: SGLangStartup | VllmStartup, model_flag: str | None
) -> tuple[ModelSpec, Fact[str], list[str]]:
    """The model spec, where its name came from, and warnings (a class that disagrees).

    Order: `--model`; the model path in the printed arguments or launch command; the model class
    of SGLang's `Load weight end. type=...` when exactly one catalog model has it.
    """
    warnings: list[str] = []
    if model_flag:
        spec, source = resolve_model(model_flag), stated(model_flag, "from --model")
    else:
        spec, source = _from_log(startup)
    arch = _architecture(startup)
    if arch is not None and arch.value != spec.architecture:
        warnings.append(
            f"the log loaded {arch.value} ({arch.where}) but {spec.model_id} is "
            f"{spec.architecture}: check --model"
        )
    return spec, source, warnings


def _from_log(startup: SGLangStartup | VllmStartup) -> tuple[ModelSpec, Fact[str]]:
    tried: list[str] = []
    for args in _arg_sources(startup):
        for key in _MODEL_KEYS:
            name = args.values.get(key)
            if not isinstance(name, str) or not name:
                continue
            try:
                return resolve_model(name), args.fact(name)
            except KvtierError as exc:
                tried.append(f"{name!r} (line {args.line}): {exc}")
    arch = _architecture(startup)
    if arch is not None:
        ids = model_for_architecture(arch.value)
        if len(ids) == 1:
            return resolve_model(ids[0]), Fact(ids[0], arch.line, arch.text, arch.rank)
        tried.append(
            f"model class {arch.value} ({arch.where}) fits "
            + (", ".join(ids) if ids else "no catalog model")
        )
    detail = "; ".join(tried) if tried else "the log names no model path or model class"
    raise KvtierError(f"cannot tell which model the log served ({detail}); pass --model")


def _arg_sources(startup: SGLangStartup | VllmStartup) -> list[Args]:
    printed = startup.server_args if isinstance(startup, SGLangStartup) else startup.args
    return [a for a in (printed, startup.launch) if a is not None]


def _architecture(startup: SGLangStartup | VllmStartup) -> Fact[str] | None:
    if isinstance(startup, SGLangStartup):
        for load in startup.target_weights:
            if load.architecture:
                return load.fact(load.architecture)
    return None
