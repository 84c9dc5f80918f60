"""SGLang's own scheduler classes replaying a trace, with the model forward replaced.

Runs in the SGLang virtualenv (benchmarks/peers/.venv-sglang, .ci/sglang-venv.sh):
    .venv-sglang/bin/python tests/sglang_scheduler_worker.py < CASE.json > STEPS.json

The loop is SGLang 0.5.23's `Scheduler.get_next_batch_to_run` without its overlap, disaggregation,
grammar, LoRA, HiCache or speculative branches: each step first tries a prefill batch
(`_get_new_batch_prefill_raw`: SGLang's `PrefillAdder` over the waiting queue, each request
matched by `Req.init_next_round_input` against SGLang's `RadixCache`), else runs the decode batch
(`update_running_batch`: `ScheduleBatch.check_decode_mem`, `retract_decode`, the new-token ratio's
decay, `prepare_for_decode`). Memory is SGLang's `TokenToKVPoolAllocator` and `ReqToTokenPool` on
the CPU, allocated by `ScheduleBatch.prepare_for_extend` / `prepare_for_decode`. The forward is the
only part replaced: each request's next token is a made-up id of its own, and the result handling
is `process_batch_result_prefill` / `_decode`'s (`checkpoint_kv_cache` after a prefill that does
not finish the request, `release_kv_cache(checkpoint=True)` when it finishes).

The case: {"page_size", "pool_tokens", "max_running_requests", "chunked_prefill_size",
"max_prefill_tokens", "ignore_eos", "clip_max_new_tokens", "requests": [{"rid", "tokens",
"output_len"}]}, every request waiting at the start; the clip is
SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION, which the caller sets in the environment. The answer:
one record per step; per request its cached tokens at its first prefill; each retraction as
(decode steps before it, rid); the new-token ratio `retract_decode` set at each retracting
step; the prompt tokens evicted.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from array import array
from pathlib import Path
from types import SimpleNamespace
from typing import Any

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "peers"))

import stubs  # noqa: E402

# the scheduler imports xgrammar (and through it tvm_ffi) and cuda-python's names for real
stubs.STUBBED = tuple(
    s for s in stubs.STUBBED if s not in ("xgrammar", "tvm_ffi", "apache_tvm_ffi", "cuda")
)
stubs.install()

import torch  # noqa: E402
from sglang.srt.managers import schedule_policy  # noqa: E402
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch  # noqa: E402
from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder  # noqa: E402
from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import (  # noqa: E402
    NewTokenRatioTracker,
)
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache  # noqa: E402
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixCache  # noqa: E402
from sglang.srt.runtime_context import publish, reset_context  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.server_args import ServerArgs  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402

OUTPUT_BASE = 1 << 40  # generated token ids start here, apart from every prompt token
VOCAB = 1 << 62
MODEL = SimpleNamespace(vocab_size=VOCAB, is_encoder_decoder=False)


class Engine:
    """The scheduler's state: the waiting queue, the running batch, the chunked request."""

    def __init__(self, case: dict[str, Any]) -> None:
        self.case = case
        self.allocator = TokenToKVPoolAllocator(
            case["pool_tokens"], torch.float16, "cpu", None, False
        )
        longest = max(len(r["tokens"]) + r["output_len"] for r in case["requests"])
        self.req_pool = ReqToTokenPool(
            size=case["max_running_requests"] + 1,
            max_context_len=longest + 4,
            device="cpu",
            enable_memory_saver=False,
        )
        params = CacheInitParams(
            disable=False,
            req_to_token_pool=self.req_pool,
            token_to_kv_pool_allocator=self.allocator,
            page_size=1,
        )
        self.tree = RadixCache(params)
        self.evicted_prompt = 0
        self._watch_evictions()
        self.ratio = NewTokenRatioTracker.from_config()
        self.waiting: list[Req] = [self._req(r) for r in case["requests"]]
        self.running = ScheduleBatch(reqs=[], batch_is_full=False)
        self.last_batch: ScheduleBatch | None = None
        self.chunked: Req | None = None
        self.retracted: list[str] = []  # this decode step's retracted requests, in order
        self.ratios: list[float] = []  # new_token_ratio after each retraction
        self.cached: dict[str, int] = {}

    def _watch_evictions(self) -> None:
        """Count the prompt tokens `RadixCache.evict` frees (generated tokens enter the tree
        too when a request finishes; the trace model never caches them)."""
        delete = self.tree._delete_leaf

        def counted(node: Any) -> None:
            self.evicted_prompt += sum(1 for t in node.key.token_ids if t < OUTPUT_BASE)
            delete(node)

        self.tree._delete_leaf = counted  # type: ignore[method-assign]

    def _req(self, r: dict[str, Any]) -> Req:
        sp = SamplingParams(max_new_tokens=r["output_len"], ignore_eos=self.case["ignore_eos"])
        sp.normalize(None)
        return Req(str(r["rid"]), "", array("q", r["tokens"]), sp, vocab_size=VOCAB)

    def _new_batch(self, reqs: list[Req]) -> ScheduleBatch:
        return ScheduleBatch.init_new(
            reqs,
            self.req_pool,
            self.allocator,
            self.tree,
            MODEL,
            False,
            SpeculativeAlgorithm.NONE,
            chunked_req=self.chunked,
        )

    def _gather_running(self) -> None:
        """`get_next_batch_to_run`'s head: stash the chunked request's KV in the tree, merge
        the last prefill batch (less the chunked request) into the running batch."""
        exclude = [self.chunked] if self.chunked is not None else []
        if self.chunked is not None and self.chunked.extend_end > self.chunked.prefix_len:
            checkpoint_kv_cache(self.chunked, self.tree)
        last = self.last_batch
        if last is not None and last.forward_mode.is_extend():
            size = last.batch_size()
            last.filter_batch(reqs_to_exclude=exclude)
            if last.batch_size() < size:
                self.running.batch_is_full = False
            if not last.is_empty():
                if self.running.is_empty():
                    self.running = last
                else:
                    self.running.merge_batch(last)
        size = self.running.batch_size()
        self.running.filter_batch()
        if self.running.batch_size() < size:
            self.running.batch_is_full = False

    def _adder(self) -> PrefillAdder:
        c = self.case
        return PrefillAdder(
            1,
            self.tree,
            self.allocator,
            self.running,
            self.ratio.current,
            c["max_prefill_tokens"],
            c["chunked_prefill_size"],
            0,
            0,
            max_prefill_bs=0,
            max_running_requests=c["max_running_requests"],
            waiting_queue_len=len(self.waiting),
        )

    def prefill(self) -> ScheduleBatch | None:
        """`_get_new_batch_prefill_raw` with FCFS and nothing but the radix cache."""
        if self.running.is_empty():
            self.running.batch_is_full = False
        if (self.running.batch_is_full or not self.waiting) and self.chunked is None:
            return None
        limit = self.case["max_running_requests"]
        adder = self._adder()
        if self.chunked is not None:
            self.chunked.init_next_round_input()
            self.chunked = adder.add_chunked_req(self.chunked)
        for req in self.waiting:
            if adder.budget_state() == AddReqResult.OTHER:
                break
            if len(adder.can_run_list) >= limit - len(self.running.reqs):
                self.running.batch_is_full = True
                break
            req.init_next_round_input(self.tree)
            res = adder.add_one_req(req, has_chunked_req=self.chunked is not None,
                                    truncation_align_size=None)  # fmt: skip
            if res != AddReqResult.CONTINUE:
                if res == AddReqResult.NO_TOKEN:
                    self.running.batch_is_full = len(adder.can_run_list) > 0 or (
                        not self.running.is_empty()
                    )
                break
        if not adder.can_run_list:
            return None
        chosen = set(adder.can_run_list)
        self.waiting = [r for r in self.waiting if r not in chosen]
        if adder.new_chunked_req is not None:
            self.chunked = adder.new_chunked_req
        if self.chunked is not None:
            self.chunked.inflight_middle_chunks += 1
        batch = self._new_batch(adder.can_run_list)
        batch.prepare_for_extend()
        return batch

    def decode(self) -> ScheduleBatch | None:
        """`update_running_batch`: retract on a full pool, else decay the ratio."""
        batch = self.running
        if batch.is_empty():
            return None
        initial = batch.batch_size()
        self.retracted = []
        if not batch.check_decode_mem():
            retracted, ratio, aborted = batch.retract_decode()
            assert not aborted, "a request was aborted for memory"
            self.ratio.current = ratio
            self.ratios.append(ratio)
            self.retracted = [r.rid for r in retracted]
            self.waiting.extend(retracted)  # back to the queue (_add_request_to_queue)
        else:
            self.ratio.decay_step()
        if batch.batch_size() < initial:
            batch.batch_is_full = False
        if batch.is_empty():
            return None
        batch.prepare_for_decode()
        return batch

    def finish_prefill(self, batch: ScheduleBatch) -> list[str]:
        """`process_batch_result_prefill`; the requests whose prompt this step finished."""
        done = []
        for req in batch.reqs:
            if req.inflight_middle_chunks > 0:
                req.inflight_middle_chunks -= 1
                continue
            done.append(req.rid)
            self.cached.setdefault(req.rid, req.cached_tokens)
            self._emit(req)
            if req.finished():
                release_kv_cache(req, self.tree, checkpoint=True)
            else:
                checkpoint_kv_cache(req, self.tree)
        return done

    def finish_decode(self, batch: ScheduleBatch) -> list[str]:
        done = []
        for req in batch.reqs:
            self._emit(req)
            if req.finished():
                done.append(req.rid)
                release_kv_cache(req, self.tree, checkpoint=True)
        return done

    @staticmethod
    def _emit(req: Req) -> None:
        req.output_ids.append(OUTPUT_BASE + int(req.rid) * 65_536 + len(req.output_ids))
        req.update_finish_state()


def run(case: dict[str, Any]) -> dict[str, Any]:
    engine = Engine(case)
    steps: list[dict[str, Any]] = []
    retracted: list[tuple[int, str]] = []  # (decode steps before, rid)
    decodes = 0
    finished = 0
    total = len(case["requests"])
    while finished < total:
        engine._gather_running()
        batch = engine.prefill()
        if batch is not None:
            rids = [r.rid for r in batch.reqs]
            done = engine.finish_prefill(batch)
            finished += sum(1 for r in batch.reqs if r.finished())
            steps.append({"kind": "prefill", "reqs": rids, "prompt_done": done})
            engine.last_batch = batch
            continue
        batch = engine.decode()
        if batch is None:
            raise SystemExit(f"no step can run with {total - finished} requests left")
        retracted += [(decodes, rid) for rid in engine.retracted]
        decodes += 1
        done = engine.finish_decode(batch)
        finished += len(done)
        steps.append({"kind": "decode", "size": len(batch.reqs), "finished": done,
                      "retracted": engine.retracted})  # fmt: skip
        engine.last_batch = batch
    return {
        "steps": steps,
        "cached_tokens": engine.cached,
        "retracted": retracted,
        "new_token_ratios": engine.ratios,
        "evicted_prompt_tokens": engine.evicted_prompt,
    }


def main() -> int:
    torch.set_num_threads(1)
    case = json.load(sys.stdin)
    # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION, read when schedule_policy is imported
    assert case["clip_max_new_tokens"] == schedule_policy.CLIP_MAX_NEW_TOKENS
    reset_context()
    args = ServerArgs(
        model_path="dummy",
        device="cpu",
        max_running_requests=case["max_running_requests"],
        schedule_policy="fcfs",
    )
    publish(args, role="scheduler")
    os.environ.setdefault("SGLANG_LOG_LEVEL", "error")
    json.dump(run(case), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
