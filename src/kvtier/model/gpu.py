"""GPU catalog: memory as the driver reports it, bandwidths and compute from vendor datasheets.

`resolve_gpu` accepts what people type and what tools print ("h100", "RTX PRO 6000",
"NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"): vendor words and memory-type words are
ignored, a memory size must agree with the card, anything else must match an alias.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from kvtier.errors import KvtierError

_IGNORED = frozenset({"nvidia", "geforce", "amd", "instinct", "tensor", "core", "gpu"})
_DESCRIPTORS = frozenset(
    {
        "sxm",
        "pcie",
        "hbm",
        "hbm2e",
        "hbm3",
        "hbm3e",
        "gddr6",
        "gddr6x",
        "gddr7",
        "blackwell",
        "edition",
        "workstation",
        "server",
    }
)


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model. Figures a custom GPU does not know are None, never guessed."""

    name: str
    memory_mib: int  # memory.total as nvidia-smi reports it
    hbm_gbps: float | None  # peak device memory bandwidth, GB/s
    bf16_dense_tflops: float | None
    pcie_gen: int | None
    pcie_gbps: float | None  # host link, one direction, per GPU, GB/s
    aliases: tuple[str, ...] = ()
    source: str = ""
    compute_capability: tuple[int, int] | None = None  # CUDA (major, minor); None: not CUDA
    # whether two PCIe cards of the model reach each other's memory, as NCCL's P2P transport
    # needs (False: it moves data through host memory); None: not stated
    peer_to_peer: bool | None = None
    # all-reduce between the node's GPUs (nccl-tests busbw, GB/s) and its published spread
    allreduce_gbps: float | None = None
    allreduce_gbps_range: tuple[float, float] | None = None
    allreduce_latency_us: float | None = None
    interconnect: str = ""  # what the all-reduce figures rest on, and whether calibrated
    vendor: str = "NVIDIA"  # AMD: served by the engines' ROCm builds
    # fraction of bf16 dense peak a prefill reaches where published rows set it, and those rows;
    # None: the H100's (kvtier.sim.timing.COMPUTE_EFFICIENCY)
    prefill_efficiency: float | None = None
    prefill_source: str = ""

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    @classmethod
    def custom(cls, memory_gib: float) -> GpuSpec:
        """A GPU known only by its memory (`--gpu-mem-gib`)."""
        if memory_gib <= 0:
            raise KvtierError(f"GPU memory must be positive, got {memory_gib} GiB")
        return cls(
            f"custom {memory_gib:g} GiB",
            round(memory_gib * 1024),
            None,
            None,
            None,
            None,
            source="given on the command line",
        )


def _capability(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    major, minor = text.split(".")
    return int(major), int(minor)


@cache
def gpu_catalog() -> tuple[GpuSpec, ...]:
    """Every catalog GPU, in file order."""
    text = resources.files("kvtier.model.catalog").joinpath("gpus.json").read_text("utf-8")
    return tuple(
        GpuSpec(
            g["name"],
            int(g["memory_mib"]),
            float(g["hbm_gbps"]),
            float(g["bf16_dense_tflops"]),
            int(g["pcie_gen"]),
            float(g["pcie_gbps"]),
            tuple(g.get("aliases", ())),
            g["source"],
            _capability(g.get("compute_capability")),
            g.get("peer_to_peer"),
            g.get("allreduce_gbps"),
            tuple(g["allreduce_gbps_range"]) if "allreduce_gbps_range" in g else None,
            g.get("allreduce_latency_us"),
            g.get("interconnect", ""),
            g.get("vendor", "NVIDIA"),
            g.get("prefill_efficiency"),
            g.get("prefill_source", ""),
        )
        for g in json.loads(text)["gpus"]
    )


def _tokens(text: str) -> list[str]:
    text = re.sub(r"(\d+)\s*gb\b", r"\1gb", text.lower())
    text = re.sub(r"sxm\d", "sxm", text)
    return [t for t in re.findall(r"\d+gb|[a-z]+|\d+", text) if t not in _IGNORED]


def _memory_agrees(token: str, gpu: GpuSpec) -> bool:
    # marketing sizes are decimal GB or GiB; either lands within 10% of the driver's figure
    return abs(int(token[:-2]) - gpu.memory_gib) <= 0.1 * gpu.memory_gib


def resolve_gpu(name: str) -> GpuSpec:
    """The catalog GPU `name` designates; KvtierError with the closest names otherwise."""
    words = _tokens(name)
    best: tuple[int, GpuSpec] | None = None
    for gpu in gpu_catalog():
        for alias in (gpu.name, *gpu.aliases):
            want = _tokens(alias)
            if not want or any(w not in words for w in want):
                continue
            rest = [w for w in words if w not in want]
            if all(
                w in _DESCRIPTORS or (w.endswith("gb") and _memory_agrees(w, gpu)) for w in rest
            ) and (best is None or len(want) > best[0]):
                best = (len(want), gpu)
    if best is None:
        names = {a.lower(): g.name for g in gpu_catalog() for a in (g.name, *g.aliases)}
        close = difflib.get_close_matches(name.lower(), list(names), n=len(names), cutoff=0.0)
        picks = list(dict.fromkeys(names[c] for c in close))[:3]
        raise KvtierError(
            f"unknown GPU {name!r}; closest: {', '.join(picks)} (or give --gpu-mem-gib)"
        )
    return best[1]
