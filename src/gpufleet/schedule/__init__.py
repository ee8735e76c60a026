"""gpufleet.schedule."""
