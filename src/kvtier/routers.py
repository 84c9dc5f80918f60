"""The routing policies' CLI names, in the order the help lists them: read by the flag table
without loading a policy, and by the registry that builds each."""

NAMES = (
    "round-robin",
    "random",
    "least-load",
    "power-of-two",
    "session-affinity",
    "sglang-cache-aware",
    "llm-d-approximate",
    "llm-d-precise",
    "ttft-predict",
    "dynamo-kv",
)
