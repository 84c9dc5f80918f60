# Each target bootstraps a virtualenv in .venv on first use (offline-safe: package registries only).
VENV ?= .venv
# The torch the test suite is pinned to (CPU wheel); the `torch` extra itself accepts a range.
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check '$(TORCH)'
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev,torch]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/kvtier explain examples/logs/sglang-kimi-k25-eagle3.log --host-ram-gb 396

# pytest's own exit codes pass through; 5 (no tests collected) is a failure like any other.
test: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy
	$(PY) -m pytest $(PYTEST_ARGS) || { rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: that is a failure" >&2; fi; \
	  exit $$rc; }

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy

# vLLM's own kv_cache_utils (v0.20.0, v0.21.0 wheels, no dependencies, torch CPU) as the oracle for
# kvtier's vLLM grouping, block count and logged token count, and (v0.20.0 - v0.24.0) the hybrid
# linear-attention state pages and block alignment; downloads into .oracle-vllm/.
.PHONY: oracle-vllm
oracle-vllm: $(STAMP)
	$(PY) tests/oracle_vllm/oracle_env.py
	KVTIER_ORACLE_VLLM=1 $(PY) -m pytest -q -rA tests/test_oracle_vllm.py tests/test_oracle_vllm_mamba.py

# SGLang's own default-memory code (30 wheels, v0.4.1-v0.5.23: server_args.py and, from v0.5.14,
# the CUDA-graph and memory hooks; msgspec real, every other import stubbed) as the oracle for
# engines/sglang/defaults.py, and each wheel's hybrid linear-attention state sizing (mamba_utils.py and
# its slot rule, v0.5.4-v0.5.23) for engines/sglang/mamba.py; downloads into .oracle-sglang/. CI runs
# it inside `make test` (CI=true).
.PHONY: oracle
oracle: $(STAMP)
	KVTIER_ORACLE=1 $(PY) -m pytest -q -rA tests/test_oracle_sglang.py tests/test_oracle_sglang_mamba.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis
