"""Adapters that plug kvtier into serving engines. Each imports its engine only when used, so
nothing here is a dependency of the rest of kvtier."""
