"""Write a prompt's KV into the GPU tier, let it fall to host RAM, and load it back bit-exact.

Run: .venv/bin/python examples/cache_roundtrip.py   (CPU tensors stand in for the GPU tier
when no CUDA device is present; host tensors are pinned when one is.)
"""

import torch

from kvtier.cache import TieredCache, WritePolicy, admit, finish, page_keys
from kvtier.cache.storage import Tier
from kvtier.cache.tensor_storage import KVLayout, TensorStorage
from kvtier.cache.transfer import AsyncTransfer
from kvtier.model.catalog import resolve_model

PAGE = 16
layout = KVLayout.from_geometry(resolve_model("llama-3.1-8b").kv, page_size=PAGE)
device = TensorStorage(layout, num_pages=64, tier=Tier.DEVICE)
host = TensorStorage(layout, num_pages=256, tier=Tier.HOST)

with AsyncTransfer() as transfer:
    cache = TieredCache(device, host, transfer, write_policy=WritePolicy.WRITE_THROUGH)
    prompt = list(range(1000, 1000 + 8 * PAGE))  # 8 pages of 16 tokens
    keys = page_keys(prompt, PAGE)

    request = admit(cache, keys)  # nothing cached yet: 8 new device pages
    slots = [page * PAGE + i for page in request.pages for i in range(PAGE)]
    written = []
    for layer in range(layout.num_layers):  # what the model would write while prefilling
        k = torch.randn(len(prompt), layout.num_kv_heads, layout.head_dim).to(torch.bfloat16)
        v = torch.randn_like(k, dtype=torch.float32).to(torch.bfloat16)
        device.write_kv(layer, slots, k, v)
        written.append((k, v))
    finish(cache, request)  # cached in the tree; write-through copies it to host RAM
    cache.flush()

    cache.evict(Tier.DEVICE, 8)  # the GPU copy is gone; the host copy remains
    again = admit(cache, keys)  # matched in host RAM and loaded back to the GPU tier
    again.load.wait()
    cache.poll()
    exact = all(
        torch.equal(device.read_kv(layer, again.pages)[0], k)
        and torch.equal(device.read_kv(layer, again.pages)[1], v)
        for layer, (k, v) in enumerate(written)
    )
    print(f"loaded back from host: {again.host_hit} pages; bit-exact: {exact}")
    cache.check_integrity(held_device_pages=again.pages[again.num_cached :])
