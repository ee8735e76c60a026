"""gpufleet.procure."""
