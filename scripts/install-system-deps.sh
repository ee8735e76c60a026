#!/usr/bin/env bash
# System packages the test suite uses: Chromium (report and dashboard screenshots), Prometheus
# (the telemetry adapter is tested against a real server), etcd + openssl + xz (the Kubernetes world is
# tested against a real kube-apiserver, unpacked from ../shared/k8s, which stores in etcd), podman + mmdebstrap
# + runc (the container image is built from Debian packages and run; runc because crun refuses hybrid cgroup
# hosts). Installs only what is missing, only as root;
# tests that need a missing binary skip with a reason.
set -u
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v xz >/dev/null 2>&1 || need+=(xz-utils)
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v runc >/dev/null 2>&1 || need+=(runc)
# the native build (scripts/build_native.py): a C compiler and the headers of the Python the venv runs
command -v gcc >/dev/null 2>&1 || need+=(gcc)
py=${PYTHON:-.venv/bin/python}
[ -x "$py" ] || py=python3
inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || true)
[ -n "$inc" ] && [ ! -f "$inc/Python.h" ] && need+=(python3-dev)
command -v kubectl >/dev/null 2>&1 || echo "note: kubectl >= 1.27 is not on PATH; tests/deploy/test_manifests.py \
will skip (Debian's kubernetes-client 1.20 bundles a kustomize too old for deploy/kustomize)" >&2
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "note: cannot install ${need[*]} (not root or no apt-get); the tests that need them will skip" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null 2>&1 || true
apt-get install -y -qq --no-install-recommends $(printf '%s\n' "${need[@]}" | sort -u) >/dev/null 2>&1 \
  || echo "note: apt-get install ${need[*]} failed; the tests that need them will skip" >&2
exit 0
