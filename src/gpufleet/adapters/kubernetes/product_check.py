"""Whether a node's GPU product label agrees with its machine.

``nvidia.com/gpu.product`` decides what gpufleet schedules, prices and meters a node as (labels.py: ``sku``). The
GPU operator's feature discovery writes it, but so may anyone with ``nodes/patch`` and the node's own kubelet: a
node relabelled to claim another product is priced and metered as that product. :func:`product_mismatch` compares
the label, in catalog SKUs (:func:`~gpufleet.domain.catalog.sku_for`, with the controller's ``sku_map``), with what
the machine says: its instance type (``node.kubernetes.io/instance-type``, written by the cloud provider; the types
gpufleet maps, labels.py ``INSTANCE_PRODUCTS``: reason ``gpu_product_vs_instance_type``), GKE's
``cloud.google.com/gke-accelerator`` (``gpu_product_vs_gke_accelerator``) and Karpenter's
``karpenter.k8s.aws/instance-gpu-name`` (a GPU name, e.g. ``h100``, that must be one of the product's ``-``-tokens:
``gpu_product_vs_instance_gpu_name``). A reading it cannot compare (a product or an instance type outside the
catalog, no such label) is no mismatch.

:class:`ProductCheck` (the controller, each tick, on the nodes whose object changed) records a node's mismatch
once (audit action ``node_product``, outcome ``mismatch``, with both readings; counted on /metrics as every audit
record) and its end (``consistent``). A flag for an operator, not a verdict: the node is still read by its label
(neither reading is beyond a node's own kubelet, which may write both).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.labels import INSTANCE_PRODUCTS, L_GKE_ACCELERATOR, L_GPU_NAME, L_PRODUCT
from gpufleet.control.observation import ObservedNode
from gpufleet.domain.catalog import sku_for


@dataclass(frozen=True, slots=True)
class Mismatch:
    reason: str
    readings: tuple[tuple[str, str], ...]  # (audit field, value): the label's product and what contradicts it

    def fields(self) -> dict[str, Any]:
        return dict(self.readings)


def product_mismatch(n: ObservedNode, sku_ids: tuple[str, ...], sku_map: Mapping[str, str]) -> Mismatch | None:
    """What contradicts ``n``'s ``nvidia.com/gpu.product`` (module docstring), None when nothing does."""
    want = {L_PRODUCT, L_GKE_ACCELERATOR, L_GPU_NAME}
    labels = dict(w.split("=", 1) for w in n.spec.labels if w.partition("=")[0] in want)
    product = labels.get(L_PRODUCT, "")
    claimed = sku_for(product, sku_ids, sku_map) if product else None
    if claimed is None:
        return None
    by_type = INSTANCE_PRODUCTS.get(n.instance_type, "")
    said = sku_for(by_type, sku_ids, {}) if by_type else None
    if said is not None and said != claimed:
        return Mismatch("gpu_product_vs_instance_type", (("product", product), ("instance_type", n.instance_type),
                                                         ("instance_product", by_type)))  # fmt: skip
    accelerator = labels.get(L_GKE_ACCELERATOR, "")
    said = sku_for(accelerator, sku_ids, {}) if accelerator else None
    if said is not None and said != claimed:
        return Mismatch("gpu_product_vs_gke_accelerator", (("product", product), ("accelerator", accelerator)))
    gpu_name = labels.get(L_GPU_NAME, "").lower()
    if gpu_name and gpu_name not in product.lower().split("-"):
        return Mismatch("gpu_product_vs_instance_gpu_name", (("product", product), ("gpu_name", gpu_name)))
    return None


@dataclass(slots=True)
class ProductCheck:
    """Flags nodes whose product label their machine contradicts (module docstring): each node checked when its
    observed object changes (the view keeps one object per resourceVersion), recorded when its mismatch begins,
    changes or ends."""

    sku_ids: tuple[str, ...]
    sku_map: Mapping[str, str] = field(default_factory=dict)
    _seen: dict[str, ObservedNode] = field(default_factory=dict)  # node -> the object last checked
    _flagged: dict[str, Mismatch] = field(default_factory=dict)  # node -> its mismatch recorded

    def scan(self, nodes: Sequence[ObservedNode], act: Actuator) -> None:
        for n in nodes:
            if self._seen.get(n.name) is n:
                continue
            self._seen[n.name] = n
            got = product_mismatch(n, self.sku_ids, self.sku_map)
            before = self._flagged.get(n.name)
            if got == before:
                continue
            if got is not None:
                self._flagged[n.name] = got
                act.record("node_product", n.name, got.reason, "mismatch", **got.fields())
            elif before is not None:
                del self._flagged[n.name]
                act.record("node_product", n.name, before.reason, "consistent", **before.fields())
        if len(self._seen) > len(nodes):  # nodes gone: forget them
            names = {n.name for n in nodes}
            for name in [k for k in self._seen if k not in names]:
                del self._seen[name]
                self._flagged.pop(name, None)
