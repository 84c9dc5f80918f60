"""Model resolution: catalog ids and aliases, config paths, the local Hugging Face cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtier.errors import KvtierError
from kvtier.model import catalog
from kvtier.model.catalog import catalog_ids, model_for_architecture, resolve_model

DEV_LOG_MODELS = [
    "moonshotai/Kimi-K2.5",
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-14B",
    "Qwen/Qwen3-0.6B",
    "Qwen/Qwen2.5-7B-Instruct",
    "deepseek-ai/DeepSeek-V2-Lite-Chat",
    "RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
]


def _write_config(directory: Path, model: str) -> Path:
    entry = catalog.catalog_entry(model)
    assert entry is not None
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.json"
    path.write_text(json.dumps(entry.config))
    return path


def test_dev_log_models_are_in_the_catalog() -> None:
    assert set(DEV_LOG_MODELS) <= set(catalog_ids())


@pytest.mark.parametrize(
    ("name", "model_id"),
    [
        ("kimi-k2.5", "moonshotai/Kimi-K2.5"),
        ("MOONSHOTAI/kimi-k2.5", "moonshotai/Kimi-K2.5"),
        ("Kimi-K2.5", "moonshotai/Kimi-K2.5"),
        ("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct"),
        ("meta-llama/Meta-Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct"),
        ("qwen3-8b", "Qwen/Qwen3-8B"),
        ("deepseek-ai/DeepSeek-R1-0528", "deepseek-ai/DeepSeek-R1"),
        (" gpt-oss-120b ", "openai/gpt-oss-120b"),
    ],
)
def test_resolve_by_alias_or_id(name: str, model_id: str) -> None:
    spec = resolve_model(name)
    assert spec.model_id == model_id
    assert spec.aliases  # catalog entries carry their aliases


def test_resolve_config_file_and_directory(tmp_path: Path) -> None:
    path = _write_config(tmp_path / "my-model", "qwen3-14b")
    by_file = resolve_model(str(path))
    by_dir = resolve_model(str(path.parent))
    assert by_file.model_id == str(path) and by_dir.model_id == str(path.parent)
    assert by_dir.kv == resolve_model("qwen3-14b").kv
    assert by_dir.params == resolve_model("qwen3-14b").params


def test_directory_without_config_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KvtierError, match=r"no config\.json"):
        resolve_model(str(tmp_path))


def test_unreadable_config_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(KvtierError, match="is not JSON"):
        resolve_model(str(bad))


def _fake_hub(hub: Path, repo: str, model: str, revision: str = "abc123") -> Path:
    root = hub / ("models--" + repo.replace("/", "--"))
    path = _write_config(root / "snapshots" / revision, model)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(revision)
    return path


def test_resolve_from_hf_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = tmp_path / "hub"
    _fake_hub(hub, "acme/Tiny-Llama", "llama-3.1-8b")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    spec = resolve_model("acme/tiny-llama")  # the hub's folder names keep case; lookups do not
    assert spec.model_id == "acme/tiny-llama"
    assert spec.kv == resolve_model("llama-3.1-8b").kv


def test_hf_home_and_pinned_revision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = tmp_path / "home" / "hub"
    _fake_hub(hub, "acme/thing", "qwen3-0.6b", revision="old")
    _fake_hub(hub, "acme/thing", "qwen3-8b", revision="new")  # refs/main now points here
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert resolve_model("acme/thing").num_hidden_layers == 36


def test_snapshot_path_names_its_repo(tmp_path: Path) -> None:
    snapshot = _fake_hub(tmp_path, "acme/Snap", "qwen3-8b").parent
    assert resolve_model(str(snapshot)).model_id == "acme/Snap"


@pytest.mark.parametrize(
    ("path", "model_id"),
    [
        # model paths as logs from other machines print them (S08 and S04 in shared/cases)
        (
            "/home/dell/.cache/huggingface/hub/models--Qwen--Qwen3-14B/snapshots/"
            "40c069824f4251a91eefaf281ebe4c544efd3e18",
            "Qwen/Qwen3-14B",
        ),
        (
            "/sgl-workspace/models/DeepSeek-R1-Distill-Qwen-7B",
            "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
        ),
    ],
)
def test_foreign_paths_fall_back_to_the_catalog(path: str, model_id: str) -> None:
    assert resolve_model(path).model_id == model_id


def test_other_orgs_models_are_not_taken_for_catalog_ones(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(KvtierError, match="closest catalog ids: Qwen/Qwen3-8B"):
        resolve_model("someone/Qwen3-8B")


def test_unknown_model_names_the_closest_ids(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(KvtierError) as err:
        resolve_model("llama-3.1-8x")
    message = str(err.value)
    assert message.startswith("unknown model 'llama-3.1-8x'; closest catalog ids: ")
    assert "meta-llama/Llama-3.1-8B-Instruct" in message
    assert len(message.split(": ", 1)[1].split(", ")) == 3


def test_model_for_architecture() -> None:
    assert model_for_architecture("KimiK25ForConditionalGeneration") == ["moonshotai/Kimi-K2.5"]
    assert model_for_architecture("Qwen3ForCausalLM") == [
        "Qwen/Qwen3-0.6B",
        "Qwen/Qwen3-14B",
        "Qwen/Qwen3-32B",
        "Qwen/Qwen3-8B",
    ]
    assert model_for_architecture("NoSuchForCausalLM") == []


def test_every_catalog_file_cites_its_source() -> None:
    models = Path(catalog.__file__).parent / "models"
    files = sorted(models.glob("*.json"))
    assert len(files) == len(catalog_ids())
    for f in files:
        data = json.loads(f.read_text())
        assert data["source"] == f"https://huggingface.co/{data['id']}/blob/main/config.json"
