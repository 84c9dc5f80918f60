"""A workload fitted from a serving log's periodic lines: arrivals, lengths, reuse, and the window
the log covers, each with how it was inferred.

What the lines give (engines/sglang/serving.py, engines/vllm/serving.py):

  SGLang  prefill line  #new-seq (requests admitted), #new-token, #cached-token, #queue-req after
                        the batch left the queue (scheduler `log_prefill_stats`)
          decode line   gen throughput over the decode steps since the last decode line
  vLLM    stats line    prompt and generation tokens/s over the last interval (10 s by default,
                        `VLLM_LOG_STATS_INTERVAL`), running and waiting at its end

  requests admitted  SGLang: the sum of #new-seq, less one for a batch after a batch that filled
                     the chunk (the largest #new-token, printed at least twice): SGLang counts the
                     request it is chunking again in the next batch. vLLM prints no count: the
                     prompt tokens over a mean prompt length the user gives.
  prompt tokens      SGLang: #new-token + #cached-token; vLLM: prompt tokens/s x interval
  arrivals           between two samples: admitted + queue now - queue before (never negative);
                     the queue at the first sample and its admissions arrive at the window start
  output tokens      generation tokens/s x window / requests admitted (or as given)
  reuse              SGLang: #cached-token over all prompt tokens; vLLM: the last printed rate
  accept length      speculative decoding's tokens per decode step, the mean of what the log
                     printed (SGLang's `accept len`, vLLM's `Mean acceptance length`); None when
                     the log shows no speculative decoding
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence

from kvtier.errors import KvtierError
from kvtier.logs.workload import DecodeReading, FittedWorkload, Inference, ObservedWindow
from kvtier.observe.samples import Sample, ServingSamples

VLLM_STATS_INTERVAL_S = 10.0  # vllm/envs.py VLLM_LOG_STATS_INTERVAL default


def _admitted_sglang(prefills: list[Sample]) -> list[float] | None:
    """Requests each prefill line admitted, the chunked request counted once."""
    if not prefills or any("new_seqs" not in s.fields for s in prefills):
        return None
    tokens = [s.fields["new_tokens"] for s in prefills]
    chunk = max(tokens)
    chunking = tokens.count(chunk) >= 2
    admitted = []
    for i, s in enumerate(prefills):
        seqs = s.fields["new_seqs"]
        if chunking and i and tokens[i - 1] == chunk:
            seqs = max(0.0, seqs - 1)
        admitted.append(seqs)
    return admitted


def _spread(times: list[float]) -> list[float]:
    """Whole-second stamps placed inside their second: k lines of one second at (i + 1/2) / k."""
    out: list[float] = []
    i = 0
    while i < len(times):
        j = i
        while j < len(times) and times[j] == times[i]:
            j += 1
        out += [times[i] + (k + 0.5) / (j - i) for k in range(j - i)]
        i = j
    return out


def _window(data: ServingSamples, notes: list[Inference]) -> tuple[float, float, float]:
    """(start, duration, stats interval) of the time the lines cover, from the first line's time."""
    times = [s.time_s for s in data.samples]
    if data.engine == "vllm":
        gaps = [b - a for a, b in itertools.pairwise(times) if b > a]
        interval = statistics.median(gaps) if gaps else VLLM_STATS_INTERVAL_S
        how = "median gap between stats lines" if gaps else "vLLM's default stats interval"
        notes.append(Inference("stats interval (s)", interval, how))
        return -interval, times[-1] + interval, interval
    resolution = 0.0 if data.fractional_times else 1.0
    how = "first to last timed line" + ("" if resolution == 0 else ", plus the last second")
    notes.append(Inference("window (s)", times[-1] + resolution, how))
    return 0.0, times[-1] + resolution, 0.0


def _vllm_admissions(
    data: ServingSamples, interval: float, prompt_tokens: int | None, notes: list[Inference]
) -> tuple[list[float], float, int, float]:
    """Requests admitted by each line, prompt tokens in all, mean prompt length, reuse."""
    src = data.observation.source
    per_sample = [s.fields.get("prompt_tps", 0.0) * interval for s in data.samples]
    if prompt_tokens is None:
        raise KvtierError(
            f"{src}: vLLM's stats lines count prompt tokens, not requests: "
            "give --mean-prompt-tokens N"
        )
    notes.append(Inference("mean prompt tokens", prompt_tokens, "given"))
    reuse = data.observation.hit_rate or 0.0
    notes.append(Inference("reuse", reuse, "vLLM's last printed prefix cache hit rate"))
    return [t / prompt_tokens for t in per_sample], sum(per_sample), prompt_tokens, reuse


def _sglang_admissions(
    data: ServingSamples, prompt_tokens: int | None, notes: list[Inference]
) -> tuple[list[float], float, int, float]:
    """Requests admitted by each line, prompt tokens in all, mean prompt length, reuse."""
    src = data.observation.source
    prefills = [s for s in data.samples if s.kind in ("prefill", "fill")]
    counts = _admitted_sglang(prefills)
    if counts is None and prompt_tokens is None:
        raise KvtierError(
            f"{src}: no prefill line with #new-seq to count requests: give --mean-prompt-tokens N"
        )
    prompts = [s.fields["new_tokens"] + s.fields.get("cached_tokens", 0.0) for s in prefills]
    prompt_total = sum(prompts)
    if prompt_total <= 0:
        raise KvtierError(f"{src}: no prompt tokens in the prefill lines")
    reuse = sum(s.fields.get("cached_tokens", 0.0) for s in prefills) / prompt_total
    notes.append(Inference("reuse", reuse, "#cached-token / (#new-token + #cached-token)"))
    if prompt_tokens is not None:
        how = "given"
        counts = [p / prompt_tokens for p in prompts]
    else:
        assert counts is not None
        how = "prompt tokens / requests admitted (#new-seq, chunked requests once)"
    if sum(counts) <= 0:
        raise KvtierError(f"{src}: the prefill lines admit no request")
    mean = max(1, round(prompt_total / sum(counts)))
    notes.append(Inference("mean prompt tokens", mean, how))
    count_of = {id(s): c for s, c in zip(prefills, counts, strict=True)}
    return [count_of.get(id(s), 0.0) for s in data.samples], prompt_total, mean, reuse


# Requests a fitted trace may hold: the trace is built in memory before it replays (a day of a
# busy server at ten requests a second; a line claiming more is not a window kvtier can replay)
MAX_FITTED_REQUESTS = 1_000_000


def _arrivals(
    samples: tuple[Sample, ...], admitted: list[float], at: list[float], start: float
) -> tuple[list[tuple[float, float, float]], list[float], list[int]]:
    """Arrivals between lines (admitted + the queue's change), and the queue when printed."""
    arrivals: list[tuple[float, float, float]] = []
    queue_times: list[float] = []
    queued: list[int] = []
    previous_q: float | None = None
    previous_t = start
    for s, took, when in zip(samples, admitted, at, strict=True):
        q = s.fields.get("queued")
        arrived = took if q is None else took + q - (previous_q or 0.0)
        if q is not None:
            previous_q = q
            queue_times.append(when - start)
            queued.append(int(q))
        if arrived > 0:
            arrivals.append((previous_t - start, when - start, arrived))
        previous_t = when
    return arrivals, queue_times, queued


def _output_tokens(
    src: str,
    gen_mean: float | None,
    duration: float,
    requests: float,
    given: int | None,
    notes: list[Inference],
) -> int:
    """The mean output length: given, else the generation throughput over the window spread
    over the requests admitted."""
    if given is not None:
        notes.append(Inference("mean output tokens", given, "given"))
        return given
    if gen_mean is None:
        raise KvtierError(
            f"{src}: no line gives a generation throughput: give --mean-output-tokens N"
        )
    output_tokens = max(1, round(gen_mean * duration / max(requests, 1.0)))
    how = "mean generation tokens/s x window / requests admitted"
    notes.append(Inference("mean output tokens", output_tokens, how))
    return output_tokens


def _decode_readings(samples: Sequence[Sample]) -> tuple[DecodeReading, ...]:
    """The lines of a decoding batch: running requests, generation tokens/s, KV usage."""
    return tuple(
        DecodeReading(int(s.fields["running"]), s.fields["gen_tps"], s.fields.get("kv_usage"))
        for s in samples
        if s.kind in ("decode", "stats")
        and s.fields.get("gen_tps", 0) > 0
        and s.fields.get("running", 0) > 0
    )


def fit_workload(
    data: ServingSamples, prompt_tokens: int | None = None, output_tokens: int | None = None
) -> FittedWorkload:
    """The workload the log's periodic lines describe; `prompt_tokens` / `output_tokens` are
    mean lengths the user gives where the log cannot say."""
    src = data.observation.source
    samples = data.samples
    notes: list[Inference] = []
    times = [s.time_s for s in samples]
    at = times if data.fractional_times else _spread(times)
    start, duration, interval = _window(data, notes)
    if duration <= 0:
        raise KvtierError(f"{src}: the serving lines span no time; a fit needs two or more seconds")
    if data.engine == "vllm":
        admitted, prompt_total, prompt_tokens, reuse = _vllm_admissions(
            data, interval, prompt_tokens, notes
        )
    else:
        admitted, prompt_total, prompt_tokens, reuse = _sglang_admissions(
            data, prompt_tokens, notes
        )
    requests = sum(admitted)
    if requests <= 0:
        raise KvtierError(f"{src}: no prompt tokens in the serving lines: no request to fit")
    notes.append(Inference("requests admitted", requests, "over the window"))
    gens = [s.fields["gen_tps"] for s in samples if "gen_tps" in s.fields]
    gen_mean = statistics.fmean(gens) if gens else None
    output_tokens = _output_tokens(src, gen_mean, duration, requests, output_tokens, notes)
    arrivals, queue_times, queued = _arrivals(samples, admitted, at, start)
    first_running = next((s.fields["running"] for s in samples if "running" in s.fields), 0.0)
    how = "the first line's running requests: admitted before the window opens"
    notes.append(Inference("running at start", first_running, how))
    total = sum(n for _, _, n in arrivals)
    if total + first_running > MAX_FITTED_REQUESTS:
        raise KvtierError(
            f"{src}: the log's lines admit {total + first_running:,.0f} requests in "
            f"{duration:g} s; a fitted workload holds at most {MAX_FITTED_REQUESTS:,}: give a "
            "shorter window of the log"
        )
    notes.append(Inference("arrivals", total, "admitted + change of the queue"))
    window = ObservedWindow(
        duration_s=duration,
        prompt_tps=prompt_total / duration,
        gen_tps=gen_mean,
        hit_rate=reuse,
        queue_times_s=tuple(queue_times),
        queued=tuple(queued),
        saturated=any(q > 0 for q in queued),
    )
    return FittedWorkload(
        source=src,
        engine=data.engine,
        window=window,
        arrivals=tuple(arrivals),
        running_at_start=int(first_running),
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        reuse=reuse,
        pool_tokens=data.observation.pool_tokens,
        decode=_decode_readings(samples),
        inferences=tuple(notes),
        admitted=requests,
        accept_length=statistics.fmean(data.accept_lengths) if data.accept_lengths else None,
        accept_lines=len(data.accept_lengths),
    )
