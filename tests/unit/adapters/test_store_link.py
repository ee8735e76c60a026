"""The controller's work off its binding loop (adapters/kubernetes/side_worker.py, store_link.py): one job per kind
at a time, a failing job reported and the next one run, and the usage meter reading on the caller's thread while
its write hangs on the store."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from gpufleet.adapters.kubernetes.act import Actuator
from gpufleet.adapters.kubernetes.side_worker import SideWorker
from gpufleet.adapters.kubernetes.store_link import StoreLink
from gpufleet.adapters.kubernetes.usage import MeterLoop
from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.schedule.table import NodeSpec, PodRequest

H = 3600
T0 = 1_764_547_200
POOLS = {("us-east-1", "h100_80gb", "on_demand"): "aws/us-east-1/h100_80gb/on_demand"}


def test_a_kind_waiting_or_running_is_not_queued_again_and_a_failure_does_not_stop_the_worker() -> None:
    errors: list[tuple[str, str]] = []
    worker = SideWorker("test", lambda kind, exc: errors.append((kind, str(exc))))
    gate = threading.Event()
    ran: list[str] = []

    def hang() -> None:
        gate.wait(10)
        ran.append("sync")

    def fail() -> None:
        raise OSError("store down")

    assert worker.submit("sync", hang)
    assert not worker.submit("sync", hang)  # running: not queued twice
    assert worker.submit("meter", fail) and not worker.submit("meter", fail)  # waiting behind the sync
    assert worker.busy("sync") and not worker.wait_idle(0.2)
    gate.set()
    assert worker.wait_idle(5)
    assert ran == ["sync"] and errors == [("meter", "store down")]
    assert worker.submit("meter", lambda: ran.append("meter")) and worker.wait_idle(5) and ran[-1] == "meter"
    assert worker.stop(5) and not worker.submit("sync", hang)


def test_the_meter_reads_on_the_callers_thread_while_its_write_hangs() -> None:
    obs = Observation(
        T0,
        (ObservedNode(NodeSpec("e", 128_000, 1_024_000, 8), sku="NVIDIA-H100-80GB-HBM3", region="us-east-1",
                      capacity_type="on-demand"),),
        (ObservedPod(PodRequest("ns/t-0", 1000, 1024, 4, 1000), "ns", "t-0", "t-0", "Running", node="e",
                     owner_name="train"),),
    )  # fmt: skip
    gate = threading.Event()
    written: list[dict[str, object]] = []

    entered = threading.Event()

    def sink(records: Sequence[dict[str, object]]) -> tuple[int, list[str]]:
        entered.set()
        gate.wait(10)  # the store hangs
        written.extend(records)
        return len(records), []

    act = Actuator(None, dry_run=False)  # type: ignore[arg-type]  # records only: no API server here
    link = StoreLink(act, "sqlite://", "prod", sync_every_s=1e9)
    link.worker.submit("inventory_sync", lambda: None)  # the sync is not what this test is about
    link.metering = MeterLoop("prod", lambda: (["h100_80gb"], POOLS), None, sink, every_s=60, util_delay_s=120)
    for k in range(H // 60 + 2):  # a reading a minute over the hour, and one more (the store answering quickly)
        link.tick(T0 + 60 * k, lambda: obs)
        assert link.worker.wait_idle(5)
    started = time.monotonic()
    link.tick(T0 + H + 120, lambda: obs)  # the hour falls due
    assert entered.wait(5)
    assert link.worker.busy("usage_metered")  # its write hangs on the store...
    for k in range(H // 60 + 3, H // 60 + 10):
        link.tick(T0 + 60 * k, lambda: obs)  # ...and the readings go on
    assert time.monotonic() - started < 5 and link.metering.meter.waiting() == [T0 + H]
    gate.set()
    assert link.worker.wait_idle(10)
    (rec,) = written
    assert (rec["bucket_start_s"], rec["gpus_allocated"], rec["gpu_util"]) == (T0, 4.0, None)
    (audit,) = [a for a in act.audit if a["action"] == "usage_metered"]
    # 59 minutes watched (the first reading waits for the store's pools): 4 GPUs on average, 4 x 59/60 GPU-hours
    assert (audit["outcome"], audit["hour"], audit["records"]) == ("applied", T0, 1)
    assert audit["util_unmeasured_gpu_h"] == round(4 * 59 / 60, 3)
    assert link.stop(5)
