"""kvtier: exact KV-cache accounting, a tiered KV cache, and a workload simulator for LLM servers."""

__version__ = "0.1.0"
