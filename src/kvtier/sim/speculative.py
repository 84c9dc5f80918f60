"""Speculative decoding as the timing model runs it: draft passes, one verify pass, accepted tokens.

One decode iteration of a batch of B requests (SGLang `EAGLEWorker.forward_batch_generation`,
vLLM `EagleProposer` / `NgramProposer` with the target's verify, v0.5.x / v0.10+):

  draft    `passes` forward passes of the draft over B x topk tokens: SGLang runs num_steps - 1
           draft steps and one draft extend over the accepted tokens, num_steps in all; vLLM
           proposes num_speculative_tokens tokens, one pass each. A pass reads the draft's
           weights and the draft's KV of the batch (the ledger's draft pool) and pays the
           fixed cost of a forward pass, as the verify pass does. N-gram drafts on
           the CPU: no pass.
  verify   one target pass over B x D tokens, D the draft tokens per request (SGLang
           --speculative-num-draft-tokens, the tree's nodes with the root; vLLM
           num_speculative_tokens + 1). It reads the weights the B x D tokens touch and the
           batch's KV, and computes 2 x active params x B x D FLOPs: at a small batch it costs
           what a one-token step costs, at a large one D times as much, so the gain falls as
           the batch grows.
  accept   each request commits `accept_length` tokens (the accepted draft tokens plus the
           target's own), at least 1 and at most num_steps + 1 (topk 1: the draft tokens).

The accept length comes from --accept-length, a serving log (SGLang's `accept len`, vLLM's
`Mean acceptance length`), or a per-method default: per-token acceptance p on a chain of
`steps` drafts gives (1 - p^(steps + 1)) / (1 - p) tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvtier.errors import KvtierError

if TYPE_CHECKING:
    from kvtier.engines.deployment import Deployment
    from kvtier.sim.timing import Line, TimingModel

# per-token acceptance p of each method's default accept length, and where it was read
ACCEPTANCE: dict[str, tuple[float, str]] = {
    "EAGLE3": (
        0.72,
        "EAGLE-3: Kimi-K2.5 draft (lightseekorg/kimi-k2.5-eagle3 card), MT-Bench accept length "
        "2.687 at 3 steps, topk 1",
    ),
    "EAGLE": (0.6, "EAGLE / EAGLE-2: assumed, below EAGLE-3's 0.72; give --accept-length"),
    "NEXTN": (
        0.85,
        "MTP: DeepSeek-V3 technical report, 85-90% acceptance of the second token",
    ),
    "STANDALONE": (0.6, "draft model: assumed; give --accept-length"),
    "NGRAM": (0.3, "n-gram: assumed, workload-bound (repetitive text accepts more)"),
}
# SGLang and vLLM spellings of each method
METHODS = {
    "EAGLE": "EAGLE",
    "EAGLE3": "EAGLE3",
    "NEXTN": "NEXTN",
    "MTP": "NEXTN",
    "DEEPSEEK_MTP": "NEXTN",
    "STANDALONE": "STANDALONE",
    "DRAFT_MODEL": "STANDALONE",
    "NGRAM": "NGRAM",
}
# SGLang's defaults when the flags are unset (server_args auto_choose_speculative_params: 3, 1, 4)
DEFAULT_STEPS, DEFAULT_TOPK = 3, 1


@dataclass(frozen=True, slots=True)
class SpecDecode:
    """One speculative-decoding configuration and what its draft costs on one rank."""

    method: str  # EAGLE, EAGLE3, NEXTN, STANDALONE or NGRAM
    passes: int  # draft forward passes per iteration
    topk: int
    draft_tokens: int  # tokens each request verifies per iteration
    accept_length: float
    accept_source: str
    draft_weight_bytes: float = 0.0  # per rank
    draft_kv_bytes_per_token: float = 0.0  # per rank
    draft_layers: int = 1

    @property
    def max_accept(self) -> int:
        return self.passes + 1

    def draft_lines(
        self, timing: TimingModel, kv0: float, grow: float, batch: int
    ) -> tuple[float, Line, Line] | None:
        """(passes, memory line, compute line) of the draft over the iteration index."""
        if self.method == "NGRAM" or not self.passes:
            return None
        hw = timing.hw
        rate = hw.hbm_gbps * 1e9 * timing.hbm_efficiency
        peak = hw.bf16_dense_tflops * 1e12 * timing.compute_efficiency
        tokens = batch * self.topk
        fixed = hw.step_overhead_s + timing.allreduce_s(tokens, self.draft_layers)
        kvb = self.draft_kv_bytes_per_token
        mem = (fixed + (self.draft_weight_bytes + kv0 * kvb) / rate, grow * kvb / rate)
        # 2 FLOPs per weight per token, the draft's weights in 2-byte elements
        comp = (fixed + self.draft_weight_bytes * tokens / peak, 0.0)
        return float(self.passes), mem, comp

    def describe(self) -> str:
        return (
            f"{self.method}: {self.passes} draft pass(es) x topk {self.topk}, "
            f"{self.draft_tokens} token(s) verified, accept length {self.accept_length:g} "
            f"({self.accept_source})"
        )


def method_of(d: Deployment) -> str | None:
    """The deployment's speculative method, normalised; None without one."""
    if d.speculative_algorithm is None:
        return None
    name = d.speculative_algorithm.upper().replace("-", "_")
    if name not in METHODS:
        raise KvtierError(
            f"speculative algorithm {d.speculative_algorithm!r} is not modelled "
            f"(one of {', '.join(sorted(METHODS))})"
        )
    return METHODS[name]


def shape(d: Deployment, engine: str) -> tuple[int, int, int]:
    """(draft passes, topk, draft tokens verified) as the engine resolves the flags."""
    if engine == "vllm":
        k = d.speculative_num_draft_tokens or DEFAULT_STEPS
        return k, 1, k + 1
    steps = d.speculative_num_steps or DEFAULT_STEPS
    topk = d.speculative_eagle_topk or DEFAULT_TOPK
    draft = d.speculative_num_draft_tokens or (steps + 1 if topk == 1 else steps * topk + 1)
    if topk == 1 and draft != steps + 1:
        raise KvtierError(
            f"--speculative-num-draft-tokens {draft} with --speculative-eagle-topk 1 must be "
            f"--speculative-num-steps + 1 = {steps + 1} (SGLang's server_args check)"
        )
    return steps, topk, draft


def check_flags(d: Deployment) -> None:
    """A speculative flag without its algorithm is refused."""
    if d.speculative_algorithm is not None:
        return
    given = [
        f"--{name.replace('_', '-')}"
        for name in (
            "speculative_num_steps",
            "speculative_eagle_topk",
            "speculative_num_draft_tokens",
            "draft_model",
        )
        if getattr(d, name) is not None
    ]
    if given:
        raise KvtierError(
            f"{', '.join(given)} without --speculative-algorithm: give the algorithm "
            "(EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM)"
        )


def accept_length(method: str, passes: int, given: float | None, origin: str) -> tuple[float, str]:
    """The accept length and its source; `given` (a flag or a log's mean) is checked against
    1 and passes + 1."""
    if given is not None:
        if not 1.0 <= given <= passes + 1:
            raise KvtierError(
                f"accept length {given:g} ({origin}) must be from 1 to the draft's {passes} "
                f"token(s) + 1 = {passes + 1}"
            )
        return given, origin
    p, source = ACCEPTANCE[method]
    value = (1 - p ** (passes + 1)) / (1 - p)
    return round(value, 4), f"default, p = {p} per token over {passes} step(s): {source}"


@dataclass(frozen=True, slots=True)
class SpecGain:
    """One decode iteration at `batch` requests of `context` tokens each, with and without the
    draft: what the draft costs and what it buys."""

    batch: int
    plain_s: float  # one iteration without speculative decoding (one token a request)
    draft_s: float  # the draft's passes
    verify_s: float  # the target's pass over the draft tokens, all-reduces and overhead included
    accept_length: float

    @property
    def speedup(self) -> float:
        """Tokens a request gets per second with the draft over without it."""
        return self.accept_length * self.plain_s / (self.draft_s + self.verify_s)

    def to_json(self) -> dict[str, float]:
        return {
            "batch": self.batch,
            "plain_step_s": self.plain_s,
            "draft_s": self.draft_s,
            "verify_s": self.verify_s,
            "accept_length": self.accept_length,
            "speedup": self.speedup,
        }


def gains(timing: TimingModel, context: int, batches: tuple[int, ...]) -> list[SpecGain]:
    """`SpecGain` at each batch size, every request holding `context` tokens of KV."""
    import dataclasses

    spec = timing.spec
    assert spec is not None
    plain = dataclasses.replace(timing, spec=None)
    out = []
    for b in batches:
        lines = timing.decode_lines(b * context, b)
        draft = 0.0
        if lines.draft is not None:
            passes, mem, comp = lines.draft
            draft = passes * max(mem[0], comp[0])
        total = lines.total(1)
        base = plain.decode_lines(b * context, b).total(1)
        out.append(SpecGain(b, base, draft, total - draft, spec.accept_length))
    return out
