"""gpufleet.report."""
