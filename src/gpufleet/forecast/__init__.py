"""gpufleet.forecast."""
