"""vLLM's half of `kvtier explain`: its startup log read into inputs, measured figures, a count.

vLLM prints the memory profile (`Memory profiling takes ...`: weights, activation peak, non-torch
memory), the KV budget it left (`Available KV cache memory: A GiB`) and the count it made of it
(`GPU KV cache size: N tokens`, or V0's `# GPU blocks: B`); total x utilization is the budget
(`determine_available_memory`), so those figures are the builder's measured inputs. The memory
lines are read in `explain_memory.py`, the ledger the log shows in `explain_ledger.py`.
"""

from __future__ import annotations

import json
import math

from kvtier.engines import explain as engines_explain
from kvtier.engines.deployment import Deployment, Measured, Profile
from kvtier.engines.explain import LogInputs, LogLedger, LogMemory, Reconciliation, Rows
from kvtier.engines.kvdtype import KVDtype
from kvtier.engines.launch import speculative_config
from kvtier.engines.ledger import Ledger
from kvtier.engines.log_geometry import HALF, LogGeometry, pick
from kvtier.engines.settings import Settings, to_fraction, to_int
from kvtier.engines.vllm import kv_transfer
from kvtier.engines.vllm import pool as vllm_budget
from kvtier.engines.vllm.explain_ledger import log_ledger
from kvtier.engines.vllm.explain_memory import VllmMemory, observed_count, read_memory
from kvtier.engines.vllm.flags import json_object
from kvtier.engines.vllm.log import VllmStartup
from kvtier.errors import KvtierError
from kvtier.logs.facts import Fact, min_over_ranks
from kvtier.logs.records import Args
from kvtier.model.description import ModelSpec
from kvtier.units import GiB


class VllmExplain:
    """`ExplainRules` for vLLM's startup log."""

    page_name = "block size"
    cell_rule = "vLLM page bytes (real_page_size_bytes) x layers / block size"

    def require_memory_lines(self, startup: VllmStartup) -> None:
        printed = (
            startup.available_kv_gib
            or startup.kv_memory_override_gib
            or startup.requested_gib
            or startup.kv_tokens is not None
            or startup.gpu_blocks is not None
        )
        engines_explain.require_memory_lines(startup.failure, bool(printed), _MEMORY_LINES)

    def printed_args(self, startup: VllmStartup) -> list[Args]:
        return [a for a in (startup.args, startup.launch) if a is not None]

    def architecture(self, startup: VllmStartup) -> Fact[str] | None:
        return None

    def ranks(self, startup: VllmStartup) -> list[str]:
        lines = [*startup.available_kv_gib, *startup.weights_gib, *startup.init_free_gib]
        tags = [f.rank for f in [*lines, *startup.total_gib]]
        return [tag for tag in [*tags, *(p.rank for p in startup.profiles)] if tag]

    def page_size(self, startup: VllmStartup, settings: Settings) -> Fact[int]:
        device = startup.kv_device.value if startup.kv_device is not None else None
        page = settings.get(
            "page_size",
            to_int,
            vllm_budget.default_block_size(device),
            f"{device or 'CUDA'} default (CacheConfig block_size)",
        )
        assert page is not None
        return page

    def kv_dtype(
        self, startup: VllmStartup, model: ModelSpec | None, settings: Settings, page: int, pp: int
    ) -> tuple[Fact[str] | None, Fact[KVDtype] | None]:
        return startup.fp8_kv, None

    def geometry(
        self, startup: VllmStartup, page: int, element_bytes: int, pp: int
    ) -> LogGeometry | None:
        return _geometry(startup, page, element_bytes, pp)

    def context(self, startup: VllmStartup) -> Fact[object] | None:
        return startup.max_model_len

    def printed_count(self, startup: VllmStartup) -> Fact[int] | None:
        return startup.kv_tokens or startup.capacity_tokens

    def memory(
        self, startup: VllmStartup, settings: Settings, parallel: int, page: Fact[int]
    ) -> LogMemory[VllmMemory]:
        memory, notes = read_memory(startup)
        return LogMemory(memory, observed_count(startup, page), tuple(notes))

    def plan_settings(self, startup: VllmStartup, settings: Settings, known: set[str]) -> Rows:
        """The async-scheduling choice vLLM logged, when no flag stated it; speculative decoding,
        which vLLM prints as one `speculative_config` dict in its arguments."""
        rows: Rows = []
        if startup.async_scheduling is not None and "async_scheduling" not in known:
            rows.append(("async_scheduling", startup.async_scheduling))
        return rows + _speculative(settings, known) + _connector_configs(settings, known)

    def measured(self, inputs: LogInputs[VllmMemory], flags: Measured) -> tuple[Measured, Rows]:
        startup = inputs.parsed.startup
        assert isinstance(startup, VllmStartup)
        utilization = startup.utilization or inputs.settings.get("mem_fraction", to_fraction)
        measured = _measured(
            startup,
            flags,
            inputs.memory.available.value if inputs.memory is not None else None,
            utilization.value
            if utilization is not None
            else vllm_budget.DEFAULT_GPU_MEMORY_UTILIZATION,
        )
        rows: Rows = []
        if utilization is not None:
            rows.append(("mem_fraction", utilization))
        if startup.version is not None:
            rows.append(("engine_version", startup.version))
        return measured, rows

    def candidate_versions(self, deployment: Deployment) -> tuple[str, ...]:
        return ()

    def rounding(self, inputs: LogInputs[VllmMemory]) -> dict[str, float]:
        return {}

    def pinned(self, inputs: LogInputs[VllmMemory]) -> str | None:
        startup = inputs.parsed.startup
        assert isinstance(startup, VllmStartup)
        override = startup.blocks_override
        if override is None:
            return None
        return (
            f"--num-gpu-blocks-override={override.value:,} set the block count ({override.where})"
        )

    def memory_rows(self, inputs: LogInputs[VllmMemory], ledger: Ledger) -> Rows:
        if inputs.memory is None:
            return []
        return [("available KV (GiB)", inputs.memory.available)]

    def ledger(
        self,
        inputs: LogInputs[VllmMemory],
        rec: Reconciliation,
        flags: Measured,
        plan: Ledger | None,
    ) -> LogLedger:
        return log_ledger(inputs, rec)


def _geometry(v: VllmStartup, block: int, element_bytes: int, pp: int) -> LogGeometry | None:
    """N is whole blocks, N x cell <= A x 2^30 < (N + block) x cell (get_num_blocks); or the
    refusal '(X GiB KV cache is needed' for max_model_len L: cdiv(L, block) blocks
    (max_memory_usage_bytes). Under PP the count is the smallest stage's while A is stage 0's
    (engines/vllm/stages.py): A / N bounds stage 0's cell from above only."""
    if v.needed_kv is not None:
        length, needed, half = v.needed_kv.value
        tokens = -(-length // block) * block
        low = math.ceil((needed - half) * GiB / tokens)
        high = math.floor((needed + half) * GiB / tokens)
        how = f"{needed:.2f} GiB needed for max_model_len {length:,} ({tokens:,} tokens in blocks)"
        return pick(low, high, element_bytes, v.needed_kv, how)
    available = v.available_kv()
    count = v.kv_tokens
    if count is None and v.gpu_blocks is not None:
        count = Fact(v.gpu_blocks.value * block, v.gpu_blocks.line, v.gpu_blocks.text)
    if available is None or count is None or count.value <= 0:
        return None
    low = math.ceil((available.value - HALF) * GiB / (count.value + block)) if pp == 1 else 0
    high = math.floor((available.value + HALF) * GiB / count.value)
    how = f"available {available.value:.2f} GiB / {count.value:,} tokens (whole blocks of {block})"
    if pp > 1:
        how += f", an upper bound under PP{pp}"
    return pick(low, high, element_bytes, count, how)


def _value(fact: Fact[float] | None) -> float | None:
    return fact.value if fact is not None else None


def _measured(
    v: VllmStartup, flags: Measured, available_gib: float | None, utilization: float
) -> Measured:
    profile = next((p for p in v.profiles if p.torch_peak_gib is not None), None)
    weights = _value(min_over_ranks(v.weights_gib))
    activation = profile.torch_peak_gib if profile else _value(v.v0_activation_gib)
    peak = _value(v.v0_torch_peak_gib)
    if activation is None and peak is not None and weights is not None:
        activation = round(peak - weights, 2)  # V0 prints the peak with the weights in it
    non_torch = profile.non_torch_gib if profile else _value(v.v0_non_torch_gib)
    graphs = _value(v.graph_estimate_gib)
    return Measured(
        profile=Profile(
            activation_gib=activation,
            non_torch_gib=non_torch,
            kv_available_gib=available_gib,
            kv_available_utilization=utilization if available_gib is not None else None,
        ),
        weights_gib=weights,
        cuda_graph_gib=graphs if graphs is not None else flags.cuda_graph_gib,
        gpu_mem_gib=_value(min_over_ranks(v.total_gib)) or flags.gpu_mem_gib,
    )


EXPLAIN = VllmExplain()


# the memory lines a start prints, as the refusal of a log without them quotes them
_MEMORY_LINES = (
    "'Available KV cache memory: X GiB', 'GPU KV cache size: N tokens' "
    "(or V0 '# GPU blocks: N' / 'Memory profiling results: ...')"
)


def _connector_configs(settings: Settings, known: set[str]) -> Rows:
    """--kv-transfer-config and --kv-events-config as the arguments printed them (config objects'
    reprs), as JSON: a connector or KV events can turn the hybrid KV cache manager off
    (hma.py), and a connector sizes a host tier (offloading.py)."""
    rows: Rows = []
    for name, convert in (("kv_transfer_config", _transfer), ("kv_events_config", _json)):
        if name not in known and (fact := settings.get(name, convert)) is not None:
            rows.append((name, fact))
    return rows


def _transfer(raw: object) -> str:
    """A printed KVTransferConfig repr's pairs (kv_transfer.logged), or the flag's JSON text."""
    return kv_transfer.logged(raw) if isinstance(raw, dict) else _json(raw)


def _json(raw: object) -> str:
    """A logged config object (its repr's pairs) or JSON text, as JSON text (BadChoice, a
    ValueError, when it is no JSON object)."""
    if isinstance(raw, str):
        return json_object(raw)
    if not isinstance(raw, dict):
        raise TypeError(raw)
    return json.dumps(raw)


def _speculative(settings: Settings, known: set[str]) -> Rows:
    """speculative_config's Deployment fields not already known."""
    for args in settings.printed:
        config = args.values.get("speculative_config")
        if not isinstance(config, dict):
            continue
        try:
            values = speculative_config(config)
        except KvtierError as exc:
            settings.warnings.append(f"line {args.line}: speculative_config not read ({exc})")
            return []
        return [(k, args.fact(v)) for k, v in values.items() if k not in known]
    return []
