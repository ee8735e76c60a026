"""gpufleet.bench."""
