"""The data layer: the benchmark format, the metrics, the mobile dialogue generator (above the runtime, below train/export/bench)."""
