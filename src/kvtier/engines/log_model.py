"""Which model a startup log served: from `--model`, from the log's own arguments, or its class.

The engine reads its log (`engines/<engine>/explain.py`): the argument dumps it printed, and the
model class it loaded when it prints one; the rules here are the same for every engine.
"""

from __future__ import annotations

from kvtier.errors import KvtierError
from kvtier.logs.facts import Fact, stated
from kvtier.logs.records import Args
from kvtier.model.catalog import model_for_architecture, resolve_model
from kvtier.model.description import ModelSpec

# Argument names that carry the model path, SGLang first, then vLLM.
_MODEL_KEYS = ("model_path", "model")


def identify_model(
    printed: list[Args],
    architecture: Fact[str] | None,
    model_flag: str | None,
    by_class: bool = True,
) -> tuple[ModelSpec | None, Fact[str], list[str]]:
    """The model spec (None when kvtier cannot resolve it), where its name came from, and
    warnings (a model class or a model path that disagrees with `--model`).

    Order: `--model`; the model path in the printed arguments or launch command; the model class
    of SGLang's `Load weight end. type=...` when exactly one catalog model has it (`by_class`).
    """
    warnings: list[str] = []
    logged = _logged_name(printed)
    if model_flag:
        spec, source = resolve_model(model_flag), stated(model_flag, "from --model")
        if logged is not None and not _same_model(logged.value, spec):
            warnings.append(
                f"--model {model_flag} but the log served {logged.value!r} ({logged.where}): "
                "check --model"
            )
    else:
        found, source = _from_log(printed, architecture, by_class)
        if found is None:
            return None, source, warnings
        spec = found
    arch = architecture
    if arch is not None and arch.value != spec.architecture:
        warnings.append(
            f"the log loaded {arch.value} ({arch.where}) but {spec.model_id} is "
            f"{spec.architecture}: check --model"
        )
    return spec, source, warnings


def _logged_name(printed: list[Args]) -> Fact[str] | None:
    """The model path or id the log's arguments name, if any."""
    for args in printed:
        for key in _MODEL_KEYS:
            name = args.values.get(key)
            if isinstance(name, str) and name:
                return args.fact(name)
    return None


def _same_model(logged: str, spec: ModelSpec) -> bool:
    """Whether a logged path or id names `spec`: it resolves to it, or its last part is the
    spec's name or one of its aliases (a local copy of the checkpoint)."""
    try:
        if resolve_model(logged).model_id == spec.model_id:
            return True
    except KvtierError:
        pass
    last = logged.rstrip("/").split("/")[-1].lower()
    names = {spec.model_id.lower(), spec.model_id.split("/")[-1].lower()}
    names |= {a.lower() for a in spec.aliases}
    return last in names


def named_by_class(
    printed: list[Args], architecture: Fact[str] | None, model_flag: str | None
) -> bool:
    """Whether the model would be taken from the log's model class alone (no name anywhere)."""
    return not model_flag and _logged_name(printed) is None and architecture is not None


def _from_log(
    printed: list[Args], arch: Fact[str] | None, by_class: bool = True
) -> tuple[ModelSpec | None, Fact[str]]:
    """The model the log names, or None with the name to show (the log's path, or why none)."""
    tried: list[str] = []
    for args in printed:
        for key in _MODEL_KEYS:
            name = args.values.get(key)
            if not isinstance(name, str) or not name:
                continue
            try:
                return resolve_model(name), args.fact(name)
            except KvtierError as exc:
                tried.append(f"{name!r} (line {args.line}): {exc}")
    if arch is not None:
        ids = model_for_architecture(arch.value)
        if len(ids) == 1 and by_class:
            return resolve_model(ids[0]), Fact(ids[0], arch.line, arch.text, arch.rank)
        tried.append(
            f"model class {arch.value} ({arch.where}) fits "
            + (", ".join(ids) if ids else "no catalog model")
        )
    logged = _logged_name(printed)
    detail = "; ".join(tried) if tried else "the log names no model path or model class"
    if logged is not None:
        return None, Fact(logged.value, logged.line, f"{logged.text}", logged.rank)
    return None, stated("unknown model", f"not resolved ({detail})")
