#!/bin/sh
# Container entrypoint: `gpufleet ARGS...` (default `serve`), with PORT mapped to GPUFLEET_PORT.
set -eu
export GPUFLEET_PORT="${GPUFLEET_PORT:-${PORT:-8000}}"
exec gpufleet "$@"
