"""Event kinds, pod states and time units shared by the world and its mixins (one definition each)."""

from __future__ import annotations

# event kinds: the index of the world's handler for each
ARRIVE, JOB_END, NODE_UP, NODE_FAIL, NODE_REPAIR, SPOT_PREEMPT, TICK, DAILY, RES_EVENT, STOCK, READY, RECHECK = range(
    12
)
# pod states (0 = not arrived yet)
QUEUED, RUNNING, DONE, REMOVED = 1, 2, 3, 4
PRIO_SERVING = 3  # queue priority of serving replicas (above every training priority)
HOUR_S = 3600
DAY_S = 86400
