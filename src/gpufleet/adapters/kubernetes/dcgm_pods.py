"""Per-pod DCGM utilization from a telemetry batch: a pod's samples over every device and step it is attributed,
with pods that time-slice one device splitting its busy time (used by the usage meter, ``usage.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from gpufleet.cost.telemetry import TelemetryBatch


def pod_utilization(
    batch: TelemetryBatch, held: Mapping[tuple[str, str], float] | None = None
) -> dict[tuple[str, str], float]:
    """The mean utilization (0..1) of each pod's GPU samples in a DCGM batch (every device and step of the pod).

    ``held``: the GPUs each pod holds (a pod not in it: one GPU per device it is attributed). Where several pods are
    attributed the same device at the same step (time-slicing, each pod's series carrying the whole device's
    utilization) and together hold more than the one GPU it is, each pod's sample is the device's utilization over
    the GPUs they hold together: their busy GPU-time adds up to the device's, split in proportion to what each holds
    (a pod's GPUs spread evenly over the devices it is attributed, at most one on each). Pods that hold one GPU or
    less together (MIG shares, ``gpufleet.io/gpu-milli`` shares that fit) each keep the device's utilization, as a pod
    alone on it."""
    if len(batch) == 0:
        return {}
    ok = ~np.isnan(batch.util)
    pods = [(k.namespace, k.pod) for k in batch.series]
    names = sorted(set(pods))
    index = {p: i for i, p in enumerate(names)}
    of_series = np.array([index[p] for p in pods], dtype=np.int64)
    which = of_series[batch.series_idx[ok]]
    util = batch.util[ok]
    if held is not None and which.size:
        util = util / _sharers_gpus(batch, ok, names, of_series, held)
    total = np.bincount(which, weights=util, minlength=len(names))
    count = np.bincount(which, minlength=len(names))
    return {p: float(total[i] / count[i]) for i, p in enumerate(names) if count[i] > 0}


def _sharers_gpus(
    batch: TelemetryBatch,
    ok: npt.NDArray[np.bool_],
    names: Sequence[tuple[str, str]],
    of_series: npt.NDArray[np.int64],
    held: Mapping[tuple[str, str], float],
) -> npt.NDArray[np.float64]:
    """For each measured sample (``ok``), the GPUs held together by the pods attributed its device at its step, at
    least 1 (:func:`pod_utilization`)."""
    devices = sorted({k.device for k in batch.series})
    dev_index = {d: i for i, d in enumerate(devices)}
    of_device = np.array([dev_index[k.device] for k in batch.series], dtype=np.int64)
    pod_devices: dict[int, set[int]] = {}
    for s_i, p_i in enumerate(of_series.tolist()):
        pod_devices.setdefault(p_i, set()).add(int(of_device[s_i]))
    per_device = np.array(
        [min(1.0, held[p] / len(pod_devices[i])) if p in held else 1.0 for i, p in enumerate(names)], dtype=np.float64
    )  # at most one GPU of a device per pod (a pod whose other devices have no series here)
    sidx = batch.series_idx[ok]
    pod_i, dev_i, t = of_series[sidx], of_device[sidx], batch.t_s[ok].astype(np.int64)
    t0 = int(t.min())
    cell = dev_i * (int(t.max()) - t0 + 1) + (t - t0)  # one device at one step
    cells, cell_of = np.unique(cell, return_inverse=True)
    _, first = np.unique(pod_i * len(cells) + cell_of, return_index=True)  # a pod counted once per cell
    together = np.bincount(cell_of[first], weights=per_device[pod_i[first]], minlength=len(cells))
    return np.asarray(np.maximum(1.0, together)[cell_of], dtype=np.float64)
