"""A recorded cluster: nodes and pods as the loop's observation types, to JSON and back.

``gpufleet k8s export`` writes ``{"format": "gpufleet-k8s-export/1", "nodes": [...], "pods": [...]}`` where
each node is a :class:`NodeSpec` plus its world fields and each pod a :class:`PodRequest` plus placement
and labels. :func:`load_export` reads it back into an :class:`Observation`, which replays through the
same :class:`~gpufleet.control.binding.BindingPlanner` (``gpufleet k8s replay``): what-if with another
policy, or with the bound pods re-placed from scratch.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from gpufleet.adapters.inputs import read_input_text
from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.table import NodeSpec, PodRequest

FORMAT = "gpufleet-k8s-export/1"


def to_json(obs: Observation) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "now_s": obs.now_s,
        "nodes": [dataclasses.asdict(n) for n in obs.nodes],
        "pods": [dataclasses.asdict(p) for p in obs.pods],
    }


def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def load_export(path: Path) -> Observation:
    try:
        doc = json.loads(read_input_text(path))
    except (ValueError, RecursionError) as exc:
        raise ValidationError("export", f"not JSON: {exc}", str(path)) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValidationError("format", f"expected {FORMAT!r}", str(path))
    nodes, pods = [], []
    where = "nodes"
    try:
        for i, n in enumerate(doc["nodes"]):
            where = f"nodes[{i}]"
            spec = NodeSpec(**{k: _tuples(v) for k, v in n.pop("spec").items()})
            nodes.append(ObservedNode(spec=spec, **{k: _tuples(v) for k, v in n.items()}))
        for i, p in enumerate(doc["pods"]):
            where = f"pods[{i}]"
            req = PodRequest(**{k: _tuples(v) for k, v in p.pop("request").items()})
            pods.append(ObservedPod(request=req, **{k: _tuples(v) for k, v in p.items()}))
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValidationError(where, f"malformed entry: {exc}", str(path)) from None
    now_s = doc.get("now_s", 0.0)
    if isinstance(now_s, bool) or not isinstance(now_s, int | float) or not math.isfinite(now_s):
        raise ValidationError("now_s", f"must be a number of seconds, got {now_s!r}", str(path))
    return Observation(float(now_s), tuple(nodes), tuple(pods))
