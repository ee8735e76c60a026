"""gpufleet.autoscale."""
