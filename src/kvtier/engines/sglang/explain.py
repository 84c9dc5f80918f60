"""SGLang's half of `kvtier explain`: its startup log read into inputs, measured figures, a count.

SGLang prints the free memory before and after the weights load (`Load weight begin/end`), the
pool it allocated (`KV Cache is allocated. #tokens: N, K size: a GB, V size: b GB`) and, in its
arguments, `mem_fraction_static`; the pool is `rest = free_after - free_before x (1 - f)` over the
cell size (`profile_max_num_token`), so those figures are the builder's measured inputs. The
memory lines are read in `explain_memory.py`, the ledger the log shows in `explain_ledger.py`.
"""

from __future__ import annotations

import math

from kvtier.engines import explain as engines_explain
from kvtier.engines.deployment import Deployment, FreeMemory, Measured
from kvtier.engines.explain import LogInputs, LogLedger, LogMemory, Reconciliation, Rows
from kvtier.engines.inputs import stage_layers
from kvtier.engines.kvdtype import KVDtype
from kvtier.engines.ledger import Ledger
from kvtier.engines.log_geometry import HALF, LogGeometry, pick
from kvtier.engines.settings import Settings, to_int
from kvtier.engines.sglang import mamba, versions
from kvtier.engines.sglang import pool as sglang_pool
from kvtier.engines.sglang.explain_ledger import log_ledger
from kvtier.engines.sglang.explain_memory import SGLangMemory, logged_count, read_memory
from kvtier.engines.sglang.log import SGLangStartup
from kvtier.errors import KvtierError
from kvtier.logs.facts import Fact, stated
from kvtier.logs.records import Args, Printed
from kvtier.model.description import ModelSpec
from kvtier.model.gpu import resolve_gpu
from kvtier.units import GiB


class SGLangExplain:
    """`ExplainRules` for SGLang's startup log."""

    page_name = "page size"
    cell_rule = "SGLang cell size (get_cell_size_per_token)"

    def require_memory_lines(self, startup: SGLangStartup) -> None:
        printed = startup.load_begin or startup.weights or startup.pools or startup.summary
        engines_explain.require_memory_lines(startup.failure, bool(printed), _MEMORY_LINES)

    def printed_args(self, startup: SGLangStartup) -> list[Args]:
        return [a for a in (startup.server_args, startup.launch) if a is not None]

    def architecture(self, startup: SGLangStartup) -> Fact[str] | None:
        for load in startup.weights_by_rank():
            if load.architecture:
                return load.fact(load.architecture)
        return None

    def ranks(self, startup: SGLangStartup) -> list[str]:
        lines: list[Fact[float] | Printed] = [*startup.load_begin, *startup.weights]
        lines += [*startup.pools, *startup.pool_end, *startup.graphs]
        return [line.rank for line in lines if line.rank]

    def page_size(self, startup: SGLangStartup, settings: Settings) -> Fact[int]:
        page = settings.get("page_size", to_int, 1, "default page size 1")
        assert page is not None
        return page

    def kv_dtype(
        self,
        startup: SGLangStartup,
        model: ModelSpec | None,
        settings: Settings,
        page: int,
        pp: int,
    ) -> tuple[Fact[str] | None, Fact[KVDtype] | None]:
        auto = _dsa_auto_dtype(startup, model, settings, page, pp)
        return startup.kv_dtype or _pool_dtype(startup), auto

    def geometry(
        self, startup: SGLangStartup, page: int, element_bytes: int, pp: int
    ) -> LogGeometry | None:
        return _geometry(startup, page, element_bytes)

    def context(self, startup: SGLangStartup) -> Fact[object] | None:
        summary = startup.summary
        if summary is not None and summary.context_len is not None:
            return summary.fact(summary.context_len)
        return None

    def printed_count(self, startup: SGLangStartup) -> Fact[int] | None:
        return logged_count(startup)

    def memory(
        self, startup: SGLangStartup, settings: Settings, parallel: int, page: Fact[int]
    ) -> LogMemory[SGLangMemory]:
        return read_memory(startup, settings, parallel)

    def plan_settings(self, startup: SGLangStartup, settings: Settings, known: set[str]) -> Rows:
        return []

    def measured(self, inputs: LogInputs[SGLangMemory], flags: Measured) -> tuple[Measured, Rows]:
        startup = inputs.parsed.startup
        assert isinstance(startup, SGLangStartup)
        mem = inputs.memory
        rows: Rows = []
        if mem is not None and mem.fraction is not None:
            rows.append(("mem_fraction", mem.fraction))
        return _measured(inputs, startup, flags), rows

    def candidate_versions(self, deployment: Deployment) -> tuple[str, ...]:
        """A log that states neither the fraction nor the version: the default rule of every
        era is a candidate."""
        if deployment.mem_fraction is not None or deployment.engine_version:
            return ()
        return tuple(str(v) for v in versions.FRACTION_RULE_CANDIDATES)

    def rounding(self, inputs: LogInputs[SGLangMemory]) -> dict[str, float]:
        mem = inputs.memory
        return {"gpu_mem_gib": mem.card.half} if mem is not None and mem.card is not None else {}

    def pinned(self, inputs: LogInputs[SGLangMemory]) -> str | None:
        return None

    def memory_rows(self, inputs: LogInputs[SGLangMemory], ledger: Ledger) -> Rows:
        s = inputs.memory
        if s is None:
            return []
        fraction: Fact[object] = (
            s.fraction
            if s.fraction is not None
            else stated(ledger.mem_fraction, _input_origin(ledger, "mem_fraction_static"))
        )
        return [
            ("free before load (GiB, min over ranks)", s.free_before),
            ("free after load (GiB, min over ranks)", s.free_after),
            ("mem_fraction_static", fraction),
        ]

    def ledger(
        self,
        inputs: LogInputs[SGLangMemory],
        rec: Reconciliation,
        flags: Measured,
        plan: Ledger | None,
    ) -> LogLedger:
        return log_ledger(inputs, rec, flags, plan)


def _input_origin(ledger: Ledger, name: str) -> str:
    return next((i.origin for i in ledger.inputs if i.name == name), "default")


def _geometry(s: SGLangStartup, page: int, element_bytes: int) -> LogGeometry | None:
    """The buffers hold (N + page) x cell bytes (memory_pool.py), each size to 2 decimals."""
    pools = [p for p in s.pools_by_rank() if p.tokens and p.total_gib is not None]
    if not pools:
        return None
    pool = min(pools, key=lambda p: p.tokens or 0)
    assert pool.tokens is not None and pool.total_gib is not None
    half = HALF if pool.kv_gib is not None else 2 * HALF  # K and V rounded apart
    cells = pool.tokens + page
    low = math.ceil(max(pool.total_gib - half, 0.0) * GiB / cells)
    high = math.floor((pool.total_gib + half) * GiB / cells)
    how = f"KV size {pool.total_gib:.2f} GiB / (#tokens {pool.tokens:,} + page {page})"
    return pick(low, high, element_bytes, pool.fact(pool.tokens), how)


def _dsa_auto_dtype(
    startup: SGLangStartup,
    model: ModelSpec | None,
    settings: Settings,
    page: int,
    pp: int,
) -> Fact[KVDtype] | None:
    """What SGLang's `--kv-cache-dtype auto` becomes for a DSA model (server_args, v0.5.4+):
    fp8_e4m3 from compute capability 10.0 (`dsa_kv_dtype`). The card is --gpu's; without it,
    fp8 when the printed KV size per token is the fp8 pool layout (`dsa_pool_cell`)."""
    if model is None or not model.kv.index_head_dim:
        return None
    gpu = settings.flags.get("gpu")
    if isinstance(gpu, str):
        try:
            card = resolve_gpu(gpu)
        except KvtierError:
            card = None
        if card is not None:
            dtype = sglang_pool.dsa_kv_dtype(card.compute_capability)
            cc = card.compute_capability
            how = f"compute capability {cc[0]}.{cc[1]}" if cc else "no CUDA compute capability"
            return stated(dtype, f"DSA auto rule: {dtype.name} on {card.name} ({how})")
    fp8 = sglang_pool.dsa_kv_dtype(sglang_pool.DSA_FP8_CAPABILITY)
    layers = stage_layers(model.kv.num_layers, pp)
    cell = sglang_pool.dsa_pool_cell(model.kv, layers, fp8)
    geometry = _geometry(startup, page, 1)
    if geometry is None or not geometry.fits(cell):
        return None
    line = geometry.line
    how = f"DSA auto rule: {fp8.name}, the layout of {cell:,} B/token that {geometry.how} holds"
    return Fact(fp8, line.line, how if line.line is None else line.text, line.rank)


def _pool_dtype(startup: SGLangStartup) -> Fact[str] | None:
    """The dtype the target pool's `KV Cache is allocated. dtype: ...` line prints (2026 form)."""
    pool = next((p for p in startup.pools_by_rank() if p.dtype is not None), None)
    return pool.fact(pool.dtype) if pool is not None and pool.dtype is not None else None


def _measured(inp: LogInputs[SGLangMemory], s: SGLangStartup, flags: Measured) -> Measured:
    mem = inp.memory
    if mem is None:  # no weight-load lines: the builder estimates from the card and the spec
        return flags
    card = mem.card.gib if mem.card is not None else None
    target_graphs = [g.usage_gib for g in s.graphs if not g.draft and g.usage_gib is not None]
    drafts = s.weights_by_rank(draft=True)
    draft = next((w.usage_gib for w in drafts if w.usage_gib is not None), None)
    final = s.summary.available_gpu_mem_gib if s.summary is not None else None
    return Measured(
        free=FreeMemory(
            before_load_gib=None if mem.before_inferred else mem.free_before.value,
            after_load_gib=mem.free_after.value,
            end_gib=final if final is not None else flags.free.end_gib,
        ),
        weights_gib=mem.usage.value,
        cuda_graph_gib=target_graphs[0] if target_graphs else flags.cuda_graph_gib,
        draft_weights_gib=draft if draft is not None else flags.draft_weights_gib,
        gpu_mem_gib=flags.gpu_mem_gib if flags.gpu_mem_gib is not None else card,
        state_pool_gib=_charged_state_gib(inp, s),
    )


def _charged_state_gib(inp: LogInputs[SGLangMemory], s: SGLangStartup) -> float | None:
    """The printed state pool less the padding slot the release does not charge the budget."""
    pool = max(s.state_pools, key=lambda p: p.total_gib, default=None)
    if pool is None:
        return None
    flag = inp.settings.flags.get("engine_version")
    version = versions.DEFAULT.resolve(flag if isinstance(flag, str) else None)
    return mamba.charged_state_gib(pool.total_gib, pool.slots, version)


EXPLAIN = SGLangExplain()


# the memory lines a start prints, as the refusal of a log without them quotes them
_MEMORY_LINES = (
    "'Load weight end. ... avail mem=X GB, mem usage=Y GB.', "
    "'KV Cache is allocated. #tokens: N, ...' or 'max_total_num_tokens=N, ...'"
)
