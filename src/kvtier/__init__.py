"""kvtier: exact KV-cache accounting, a tiered KV cache and a workload simulator."""

__version__ = "0.1.0"
