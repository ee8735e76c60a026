"""gpufleet.cost."""
