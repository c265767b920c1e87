"""``magicselector.bench``: measuring the runtime: quality (``eval``), latency on the host and on phones, scaling, soak."""
