#!/usr/bin/env bash
# Build the gpufleet container image from Debian packages only (no registry is needed or reachable here).
#
#   scripts/image.sh base     # the base: mmdebstrap minbase + python3 -> podman import (cached, ~2 min once)
#   scripts/image.sh build    # base, then `podman build` of ./Containerfile -> $IMAGE (what `make image` runs)
#   scripts/image.sh run ARGS # `podman run ARGS` with the flags this host needs (see below), e.g.
#                             #   scripts/image.sh run --rm -e PORT=9123 -p 9123:9123 localhost/gpufleet
#
# Environment: IMAGE (default localhost/gpufleet:latest); SUITE (Debian suite of the base, default: the
# host's own, so Debian 12 builds bookworm/Python 3.11 and Debian 13 trixie/Python 3.13); GPUFLEET_IMAGE_CACHE
# (where the base tarball is kept, default ~/.cache/gpufleet-image, outside the repository).
#
# Host quirks handled by `flags` (measured on this machine, a VM with cgroup v1 + a v2 "unified" hierarchy
# and without CAP_SYS_RESOURCE): crun refuses the hybrid cgroup layout ("cgroups in hybrid mode not
# supported"), so runc is used when it is installed and the host is hybrid; and podman's default rlimits
# (nofile/nproc of ~1M) cannot be set without CAP_SYS_RESOURCE ("setrlimit RLIMIT_NOFILE: Operation not
# permitted"), so explicit, modest limits are passed: nofile 16384 (or the host's hard limit if lower) and
# nproc 4096 (threads count against it; a gpufleet process uses a few dozen).
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-localhost/gpufleet:latest}
SUITE=${SUITE:-$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")}
CACHE=${GPUFLEET_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpufleet-image}
BASE=localhost/gpufleet-base:$SUITE

flags() {
  local hard_n nofile=16384
  hard_n=$(ulimit -Hn)
  if [ "$hard_n" != unlimited ] && [ "$hard_n" -lt "$nofile" ]; then nofile=$hard_n; fi
  local runtime=""
  if command -v runc >/dev/null 2>&1 && [ -n "$(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null)" ]; then
    runtime="--runtime runc "
  fi
  # global flag(s) first, then the limits (both accepted by `podman --runtime X run|build --ulimit ...`)
  echo "${runtime}--ulimit nofile=$nofile:$nofile --ulimit nproc=4096:4096"
}

# split `flags` into podman's global options and the run/build options
global_flags() { flags | grep -o -- '--runtime [^ ]*' || true; }
limit_flags() { flags | sed 's/--runtime [^ ]* //'; }

base() {
  if podman image exists "$BASE"; then return 0; fi
  mkdir -p "$CACHE"
  local tar="$CACHE/base-$SUITE.tar"
  if [ ! -s "$tar" ]; then
    echo "building the Debian $SUITE base with mmdebstrap (once; cached in $tar)" >&2
    mmdebstrap --quiet --format=tar --variant=minbase --include=python3,python3-venv,ca-certificates "$SUITE" "$tar.part"
    mv "$tar.part" "$tar"
  fi
  podman import --quiet "$tar" "$BASE" >/dev/null
}

build() {
  base
  local g l secret=()
  read -r -a g <<<"$(global_flags)"
  read -r -a l <<<"$(limit_flags)"
  # behind a TLS-intercepting proxy pip needs the host's CA bundle: a build secret, never stored in a layer
  for ca in "${PIP_CERT:-}" /etc/ssl/certs/ca-certificates.crt; do
    if [ -n "$ca" ] && [ -s "$ca" ]; then secret=(--secret "id=pip_cert,src=$ca"); break; fi
  done
  podman "${g[@]}" build "${l[@]}" --network host --build-arg "BASE=$BASE" "${secret[@]}" \
    -f Containerfile -t "$IMAGE" .
}

run() {
  local g l
  read -r -a g <<<"$(global_flags)"
  read -r -a l <<<"$(limit_flags)"
  exec podman "${g[@]}" run "${l[@]}" "$@"
}

case "${1:-build}" in
  base) base ;;
  build) build ;;
  run) shift; run "$@" ;;
  flags) flags ;;
  *) echo "usage: $0 [base|build|run ARGS...|flags]" >&2; exit 2 ;;
esac
