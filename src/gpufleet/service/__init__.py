"""gpufleet.service."""
