"""gpufleet.place."""
