"""Attention through the tiered cache equals attention over a plain contiguous KV cache.

Two small multi-layer models (GQA, and MLA with a latent + rope part decompressed by random
up-projections) decode requests that share system prompts and grow over turns. One run keeps
each request's KV in contiguous tensors; the other keeps it in the paged device tier of a
`TieredCache`, reuses cached prefixes, and is forced through evictions to the host and
layer-by-layer load-backs. Both compute in float32, one token at a time, so every output of
the tiered run must match the reference.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator

import pytest
import torch

from cache_tensor_support import DEVICES, gqa_geometry, mla_geometry, one_torch_thread
from kvtier.cache import Tier, TieredCache, WritePolicy, admit, finish, page_hashes
from kvtier.cache.tensor_storage import KVLayout, TensorStorage
from kvtier.cache.transfer import AsyncTransfer

PAGE = 4
VOCAB = 64
MAX_POS = 160

# write(layer, pos, kv) stores one token's KV; read(layer, n) returns float32 KV of tokens [0, n)
Write = Callable[[int, int, tuple[torch.Tensor, ...]], None]
Read = Callable[[int, int], tuple[torch.Tensor, ...]]


class TinyGQA:
    layers, hidden, q_heads, kv_heads, head_dim = 3, 32, 4, 2, 8

    def __init__(self, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        h, d = self.hidden, self.head_dim

        def w(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=g) / math.sqrt(shape[-2] if len(shape) > 2 else h)

        self.emb, self.pos = (
            torch.randn(VOCAB, h, generator=g),
            torch.randn(MAX_POS, h, generator=g),
        )
        self.wq = w(self.layers, h, self.q_heads * d)
        self.wk = w(self.layers, h, self.kv_heads * d)
        self.wv = w(self.layers, h, self.kv_heads * d)
        self.wo = w(self.layers, self.q_heads * d, h)

    def step(self, token: int, pos: int, write: Write, read: Read) -> torch.Tensor:
        x = self.emb[token] + self.pos[pos]
        group = self.q_heads // self.kv_heads
        for layer in range(self.layers):
            q = (x @ self.wq[layer]).view(self.q_heads, self.head_dim)
            k = (x @ self.wk[layer]).view(self.kv_heads, self.head_dim)
            v = (x @ self.wv[layer]).view(self.kv_heads, self.head_dim)
            write(layer, pos, (k, v))
            keys, values = read(layer, pos + 1)
            keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
            p = torch.softmax(torch.einsum("hd,thd->ht", q, keys) / math.sqrt(self.head_dim), -1)
            x = x + torch.einsum("ht,thd->hd", p, values).reshape(-1) @ self.wo[layer]
        return x


class TinyMLA:
    layers, hidden, heads, rank, rope, head_dim = 3, 32, 4, 32, 8, 8

    def __init__(self, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        h, n = self.hidden, self.heads
        self.emb, self.pos = (
            torch.randn(VOCAB, h, generator=g),
            torch.randn(MAX_POS, h, generator=g),
        )
        s = 1 / math.sqrt(h)
        self.w_dkv = torch.randn(self.layers, h, self.rank, generator=g) * s
        self.w_kr = torch.randn(self.layers, h, self.rope, generator=g) * s
        self.wq = torch.randn(self.layers, h, n * self.head_dim, generator=g) * s
        self.wqr = torch.randn(self.layers, h, n * self.rope, generator=g) * s
        r = 1 / math.sqrt(self.rank)
        self.w_uk = torch.randn(self.layers, n, self.rank, self.head_dim, generator=g) * r
        self.w_uv = torch.randn(self.layers, n, self.rank, self.head_dim, generator=g) * r
        self.wo = torch.randn(self.layers, n * self.head_dim, h, generator=g) * s

    def step(self, token: int, pos: int, write: Write, read: Read) -> torch.Tensor:
        x = self.emb[token] + self.pos[pos]
        scale = 1 / math.sqrt(self.head_dim + self.rope)
        for layer in range(self.layers):
            latent = torch.cat([x @ self.w_dkv[layer], x @ self.w_kr[layer]])
            write(layer, pos, (latent,))
            (cache,) = read(layer, pos + 1)
            c, k_rope = cache[:, : self.rank], cache[:, self.rank :]
            keys = torch.einsum("tr,hrd->thd", c, self.w_uk[layer])
            values = torch.einsum("tr,hrd->thd", c, self.w_uv[layer])
            q = (x @ self.wq[layer]).view(self.heads, self.head_dim)
            q_rope = (x @ self.wqr[layer]).view(self.heads, self.rope)
            scores = torch.einsum("hd,thd->ht", q, keys) + torch.einsum("hd,td->ht", q_rope, k_rope)
            p = torch.softmax(scores * scale, -1)
            x = x + torch.einsum("ht,thd->hd", p, values).reshape(-1) @ self.wo[layer]
        return x


Model = TinyGQA | TinyMLA


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with one_torch_thread():
        yield


def _requests(seed: int) -> list[list[int]]:
    """Chats over three system prompts; a chat's next turn extends its previous request."""
    rng = random.Random(seed)
    systems = [[rng.randrange(VOCAB) for _ in range(rng.randint(9, 14))] for _ in range(3)]
    chats: list[list[int]] = []
    requests = []
    for _ in range(14):
        if chats and rng.random() < 0.5:
            i = rng.randrange(len(chats))
            chats[i] = chats[i] + [rng.randrange(VOCAB) for _ in range(rng.randint(3, 9))]
        else:
            user = [rng.randrange(VOCAB) for _ in range(rng.randint(3, 9))]
            chats.append(rng.choice(systems) + user)
            i = len(chats) - 1
        # the request decodes 5 more tokens (teacher-forced, so the test needs no sampling)
        chats[i] = chats[i] + [rng.randrange(VOCAB) for _ in range(5)]
        requests.append(list(chats[i]))
    return requests


def _reference(model: Model, tokens: list[int], dtype: torch.dtype) -> list[torch.Tensor]:
    """Outputs for every position, with the KV in contiguous per-layer tensors of `dtype`."""
    cache: dict[tuple[int, int], torch.Tensor] = {}

    def write(layer: int, pos: int, kv: tuple[torch.Tensor, ...]) -> None:
        for part, x in enumerate(kv):
            buf = cache.setdefault((layer, part), torch.zeros(MAX_POS, *x.shape, dtype=dtype))
            buf[pos] = x.to(dtype)

    def read(layer: int, n: int) -> tuple[torch.Tensor, ...]:
        parts = 2 if isinstance(model, TinyGQA) else 1
        return tuple(cache[(layer, part)][:n].float() for part in range(parts))

    return [model.step(t, pos, write, read) for pos, t in enumerate(tokens)]


def _tiered(model: Model, cache: TieredCache, tokens: list[int]) -> dict[int, torch.Tensor]:
    """Outputs of the positions the tiered run computes (those after its cached prefix)."""
    device = cache.device
    assert isinstance(device, TensorStorage)
    prompt_pages = len(tokens) // PAGE
    keys = page_hashes(tokens, PAGE)
    total_pages = -(-len(tokens) // PAGE)
    adm = admit(cache, keys[:prompt_pages], extra_pages=total_pages - prompt_pages)
    assert adm is not None, "the device tier is too small for the test's requests"
    pages = adm.pages
    load = adm.load.handle if adm.load is not None else None

    def write(layer: int, pos: int, kv: tuple[torch.Tensor, ...]) -> None:
        slot = [pages[pos // PAGE] * PAGE + pos % PAGE]
        if isinstance(model, TinyGQA):
            device.write_kv(layer, slot, kv[0][None], kv[1][None])
        else:
            device.write_latent(layer, slot, kv[0][None])

    def read(layer: int, n: int) -> tuple[torch.Tensor, ...]:
        if load is not None:
            load.wait_layer(layer)  # the loaded prefix is needed layer by layer
        used = pages[: -(-n // PAGE)]
        if isinstance(model, TinyGQA):
            k, v = device.read_kv(layer, used)
            return k[:n].float().cpu(), v[:n].float().cpu()
        return (device.read_latent(layer, used)[:n].float().cpu(),)

    start = adm.num_cached * PAGE
    outputs = {pos: model.step(tokens[pos], pos, write, read) for pos in range(start, len(tokens))}
    finish(cache, adm, keys)
    return outputs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("kind", "dtype", "policy"),
    [
        ("gqa", "float32", WritePolicy.WRITE_THROUGH),
        ("gqa", "bfloat16", WritePolicy.WRITE_BACK),
        ("mla", "float32", WritePolicy.WRITE_BACK),
        ("mla", "bfloat16", WritePolicy.WRITE_THROUGH),
    ],
)
def test_tiered_cache_attention_equals_contiguous_attention(
    device: str, kind: str, dtype: str, policy: WritePolicy
) -> None:
    if kind == "gqa":
        model: Model = TinyGQA(seed=0)
        geometry = gqa_geometry(model.layers, model.kv_heads, model.head_dim)
    else:
        model = TinyMLA(seed=0)
        geometry = mla_geometry(model.layers, model.rank, model.rope)
    layout = KVLayout.from_geometry(geometry, page_size=PAGE, dtype=dtype)
    torch_dtype = layout.dtype.storage_dtype()
    with AsyncTransfer() as transfer:
        cache = TieredCache(
            TensorStorage(layout, 40, Tier.DEVICE, device=device),
            TensorStorage(layout, 160, Tier.HOST),
            transfer,
            write_policy=policy,
        )
        reused = 0
        for i, tokens in enumerate(_requests(seed=1)):
            want = _reference(model, tokens, torch_dtype)
            got = _tiered(model, cache, tokens)
            reused += len(tokens) - len(got)
            for pos, out in got.items():
                if dtype == "float32":
                    assert torch.equal(out, want[pos]), (i, pos)
                else:
                    torch.testing.assert_close(out, want[pos], rtol=0, atol=1e-6)
            if i % 2 == 0:
                # push everything unlocked off the device: the next hits load back from the host
                cache.flush()
                cache.evict(Tier.DEVICE, cache.device_pool.capacity)
            cache.poll()
            cache.check_integrity()
        loaded = cache.counters().loaded_from_host
        cache.flush()
    # the run must really have reused prefixes and loaded pages back
    assert reused > 100 and loaded > 20
