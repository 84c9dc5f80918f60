"""Built-in model catalog and model resolution.

Each file in `models/` holds the config.json fields kvtier needs for one Hugging Face model
(copied from the public config it cites), its canonical id and short aliases. A model name
resolves, in order, to: a catalog id or alias (case-insensitive), a local config.json or model
directory, a snapshot in the local Hugging Face cache (read only; nothing is downloaded).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from kvtier.errors import KvtierError
from kvtier.files import MAX_CONFIG_BYTES, load_json, read_input
from kvtier.model.config import model_from_config
from kvtier.model.description import ModelSpec
from kvtier.model.published import NESTED_TEXT_KEYS

_HF_CACHE_DIR = "models--"
_HF_QUANT_CONFIG = "hf_quant_config.json"


class CatalogEntry(NamedTuple):
    model_id: str
    aliases: tuple[str, ...]
    config: dict[str, Any]


@cache
def _entries() -> dict[str, CatalogEntry]:
    """Catalog entries by every lower-cased name they answer to (id, alias, id without org)."""
    by_name: dict[str, CatalogEntry] = {}
    for item in sorted(
        resources.files(__package__).joinpath("models").iterdir(), key=lambda p: p.name
    ):
        if not item.name.endswith(".json"):
            continue
        data = json.loads(item.read_text(encoding="utf-8"))
        entry = CatalogEntry(data["id"], tuple(data.get("aliases", ())), data["config"])
        for name in (entry.model_id, entry.model_id.split("/")[-1], *entry.aliases):
            key = name.lower()
            if key in by_name and by_name[key].model_id != entry.model_id:
                raise RuntimeError(f"catalog name {name!r} is claimed twice")
            by_name[key] = entry
    return by_name


def catalog_ids() -> list[str]:
    """Canonical Hugging Face ids of every catalog model, sorted."""
    return sorted({e.model_id for e in _entries().values()})


def model_for_architecture(arch_class: str) -> list[str]:
    """Catalog ids whose config names `arch_class` (e.g. from a log's `type=...`) first."""
    return sorted(
        {
            e.model_id
            for e in _entries().values()
            if e.config.get("architectures", [None])[0] == arch_class
        }
    )


def resolve_model(name_or_path: str) -> ModelSpec:
    """ModelSpec for a catalog id/alias, a config.json path or model directory, or a model in
    the local Hugging Face cache. Raises KvtierError naming the closest catalog ids."""
    if not name_or_path.strip():
        raise KvtierError("no model given")
    entry = catalog_entry(name_or_path)
    if entry is not None:
        return _from_entry(entry)
    path = _local_path(name_or_path)
    if path is not None:
        return _from_path(path, _cache_repo_id(path) or str(path))
    cached = _hf_cache_config(name_or_path)
    if cached is not None:
        return _from_path(cached, name_or_path)
    path = Path(name_or_path)
    # an engine log may name a path on another machine: its HF-cache repo or, for a path
    # (not an `org/name` id, which may be a fine-tune), its last part may be a catalog name
    is_path = name_or_path.startswith(("/", ".", "~")) or name_or_path.count("/") > 1
    for guess in (_cache_repo_id(path), path.name if is_path else None):
        if guess and (entry := catalog_entry(guess)) is not None:
            return _from_entry(entry)
    raise KvtierError(
        f"unknown model {name_or_path!r}; closest catalog ids: "
        + ", ".join(closest_ids(name_or_path))
    )


def _local_path(name: str) -> Path | None:
    """`name` as an existing local file or directory, if it is one. A name no path here can be
    (a component over the file system's limit, `~user` of an unknown user, a directory that
    cannot be read) is none: it may name a path on another machine."""
    try:
        path = Path(name).expanduser()
        return path if path.exists() else None
    except (OSError, RuntimeError):
        return None


def closest_ids(name: str, n: int = 3) -> list[str]:
    """Up to `n` catalog ids whose names look most like `name` (at least one)."""
    names = _entries()
    picks = difflib.get_close_matches(name.lower(), list(names), n=len(names), cutoff=0.0)
    out: list[str] = []
    for pick in picks:
        if names[pick].model_id not in out:
            out.append(names[pick].model_id)
        if len(out) == n:
            break
    return out


def catalog_entry(name: str) -> CatalogEntry | None:
    """The catalog entry answering to `name` (id, id without org, or alias; any case), if any."""
    return _entries().get(name.strip().lower())


def _from_entry(entry: CatalogEntry) -> ModelSpec:
    spec = model_from_config(entry.config, entry.model_id)
    return dataclasses.replace(spec, aliases=entry.aliases)


def _from_path(path: Path, model_id: str) -> ModelSpec:
    config_file = path / "config.json" if path.is_dir() else path
    if not config_file.exists():
        raise KvtierError(f"no config.json in {path}")
    # the one file rule (kvtier.files): a regular file, bounded, strict JSON, bounded nesting
    data = read_input(str(config_file), "config.json", MAX_CONFIG_BYTES)
    config = load_json(data, str(config_file))
    if not isinstance(config, dict):
        raise KvtierError(f"{config_file} is not a JSON object")
    quant_file = config_file.parent / _HF_QUANT_CONFIG
    if not _states_quantization(config) and quant_file.is_file():
        # older ModelOpt checkpoints keep their format in a file of its own, which both engines
        # read when config.json states none (vLLM transformers_utils/config.py get_config,
        # v0.20.0 - v0.21.0; SGLang ModelConfig._parse_quant_hf_config)
        data = read_input(str(quant_file), _HF_QUANT_CONFIG, MAX_CONFIG_BYTES)
        quant = load_json(data, str(quant_file))
        if not isinstance(quant, dict):
            raise KvtierError(f"{quant_file} is not a JSON object")
        config = {**config, "quantization_config": quant}
    return model_from_config(config, model_id)


def _states_quantization(config: dict[str, Any]) -> bool:
    texts = [config.get(k) for k in NESTED_TEXT_KEYS]
    return any(isinstance(c, dict) and c.get("quantization_config") for c in [config, *texts])


def _cache_repo_id(path: Path) -> str | None:
    """`org/name` of a path inside a Hugging Face cache (`.../models--org--name/snapshots/...`)."""
    for part in path.parts:
        if part.startswith(_HF_CACHE_DIR) and part.count("--") >= 2:
            org, _, name = part[len(_HF_CACHE_DIR) :].partition("--")
            return f"{org}/{name}"
    return None


def hf_hub_dir() -> Path:
    """The Hugging Face hub cache: $HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def _hf_cache_config(repo_id: str) -> Path | None:
    if repo_id.count("/") != 1:
        return None
    hub = hf_hub_dir()
    want = (_HF_CACHE_DIR + repo_id.replace("/", "--")).lower()
    if not hub.is_dir():
        return None
    for repo in hub.iterdir():
        if repo.name.lower() != want:
            continue
        ref = repo / "refs" / "main"
        if ref.is_file():
            pinned = repo / "snapshots" / ref.read_text(encoding="utf-8").strip() / "config.json"
            if pinned.is_file():
                return pinned
        found = sorted(
            (repo / "snapshots").glob("*/config.json"),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        if found:
            return found[0]
    return None
