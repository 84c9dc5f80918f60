"""A fleet: N identical simulated servers behind a router, optionally sharing an L3 store."""
