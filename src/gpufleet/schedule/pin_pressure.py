"""How much of each GPU model's free capacity the pods pinned to that model are expected to need.

A pod may name the GPU models it runs on (``PodRequest.gpu_models``). FGD's fragment measures only how
the free GPUs are cut up, not who will need them: an unconstrained pod scores the same on a scarce model
that pinned pods are waiting for as on an abundant one, and with many pinned pods the scarce models fill
with pods that could have run anywhere. :class:`PinPressure` learns, online from the requests seen, the
share of arriving GPU demand pinned to each model (a pod allowed on several models is spread over them by
their GPU capacity) and turns it into a claim per model:

    claim_k = min(1, share_pinned_k * free_all / free_k)

the fraction of model ``k``'s free GPU milli that its pinned demand will need if arrivals keep their mix
until the cluster is full. A GPU milli that a flexible pod takes on model ``k`` is, with that probability,
one that a pinned pod will miss, so :class:`gpufleet.schedule.fragpolicy.GpufleetPolicy` charges
``claim_k`` per milli placed there, in the same unit (GPU milli) as the fragment it scores. With no pinned
pod seen, the claim is zero everywhere and placement is unchanged.
"""

from __future__ import annotations

import numpy as np

from gpufleet.schedule.table import MILLI, NodeTable, PodRequest


class PinPressure:
    """Online pinned-demand shares per GPU model of ``table``; :meth:`claims` reads the current free GPUs."""

    def __init__(self, table: NodeTable) -> None:
        n_models = len(table.models)
        has_gpu = table.gpu_model >= 0
        self._model_of = {m: i for i, m in enumerate(table.models)}
        self._capacity = np.bincount(
            table.gpu_model[has_gpu], weights=table.gpu_count[has_gpu] * float(MILLI), minlength=n_models
        )
        self.pinned = np.zeros(n_models)  # GPU milli of pinned requests seen, spread over their models
        self.arrived = 0.0  # GPU milli of every GPU request seen

    @property
    def active(self) -> bool:
        return bool(self.pinned.any())

    def observe(self, req: PodRequest) -> None:
        milli = float(req.total_gpu_milli)
        if milli <= 0:
            return
        self.arrived += milli
        models = [self._model_of[m] for m in req.gpu_models if m in self._model_of]
        if not models:
            return
        cap = self._capacity[models]
        if cap.sum() > 0:
            self.pinned[models] += milli * cap / cap.sum()

    def claims(self, table: NodeTable) -> np.ndarray:
        """Per GPU model, in [0, 1]: the share of its free GPU milli that pinned demand is expected to need."""
        if not self.active:
            return np.zeros_like(self.pinned)
        has_gpu = table.gpu_model >= 0
        free = np.bincount(
            table.gpu_model[has_gpu],
            weights=table.gpu_left_milli[has_gpu].sum(axis=1).astype(np.float64),
            minlength=self.pinned.size,
        )
        need = self.pinned / self.arrived * free.sum()
        return np.where(free > 0, np.minimum(1.0, need / np.maximum(free, 1.0)), 1.0)
