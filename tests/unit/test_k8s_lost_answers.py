"""Writes whose answer is lost and which a retry meets: one placeholder per node wanted, a bind kept, not given back."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.bufferpods import apply_buffer_pods
from gpufleet.adapters.kubernetes.rest import ApiError
from gpufleet.control.buffer_pods import BufferPods


class LosingKube:
    """Stores every pod it is sent, and loses the answer to the first create of each (a 504 after the write)."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.lost: set[str] = set()

    def get(self, path: str, **_: Any) -> dict[str, Any]:
        return {"metadata": {"name": "gpufleet-buffer"}}  # the PriorityClass exists

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"].get("name")
        assert name, "the placeholder's name is chosen by the client (generateName would make a new pod per retry)"
        if name in self.pods:
            raise ApiError(409, "AlreadyExists", f'pods "{name}" already exists')
        self.pods[name] = body
        if name not in self.lost:
            self.lost.add(name)
            raise ApiError(504, "Timeout", "the answer was lost")
        return body


def test_a_lost_answer_is_retried_into_one_placeholder_per_node_wanted() -> None:
    kube = LosingKube()
    act = Actuator(kube, sleep=lambda s: None)  # type: ignore[arg-type]
    plans = [
        BufferPods("NVIDIA-H100-80GB-HBM3", 8, 2, 2, (), "start_buffer_top_up"),
        BufferPods("NVIDIA-H100-80GB-HBM3", 8, 1, 1, (), "start_buffer_top_up", spot=True),
    ]
    done = apply_buffer_pods(act, plans, "gpufleet", "gpufleet")
    assert [out for _, _, out in done] == ["conflict", "conflict", "conflict"]  # found its own pod on the retry
    assert len(kube.pods) == 3
    assert sum(n.startswith("gpufleet-buffer-spot-") for n in kube.pods) == 1


class LostBindKube:
    """A Binding that lands but whose answer is lost; the retry meets the bound pod (409)."""

    def __init__(self, bound_to: str) -> None:
        self.node = ""
        self.bound_to = bound_to
        self.posts = 0

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.posts += 1
        if self.node:
            raise ApiError(409, "Conflict", "pod p is already assigned to node " + self.node)
        self.node = self.bound_to
        raise ApiError(504, "Timeout", "the answer was lost")

    def get(self, path: str, **_: Any) -> dict[str, Any]:
        return {"metadata": {"name": "p", "uid": "u1"}, "spec": {"nodeName": self.node}}


def test_a_bind_whose_answer_was_lost_is_applied_not_given_back() -> None:
    """Before: the retry's 409 made the bind a conflict, the planner gave the pod's GPUs back while it ran there."""
    kube = LostBindKube("n1")
    act = Actuator(kube, sleep=lambda s: None)  # type: ignore[arg-type]
    assert act.bind("ml", "p", "u1", "n1", (0,), "placed") == "applied"
    assert kube.posts == 2 and act.audit[-1]["found_bound"] is True
    other = LostBindKube("n2")  # bound meanwhile elsewhere (another scheduler): a conflict stays a conflict
    other.node = "n2"
    assert Actuator(other, sleep=lambda s: None).bind("ml", "p", "u1", "n1", (0,), "placed") == "conflict"  # type: ignore[arg-type]
