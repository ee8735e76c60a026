"""Erlang C staffing for replicas that serve one request at a time (M/M/c, first come first served).

For ``servers`` identical servers, Poisson arrivals of offered load ``a`` = rate x mean service time (in
servers) and exponential service, the chance that an arrival waits at all is Erlang C, ``C(servers, a)``, and
the chance it waits longer than ``t`` is ``C * exp(-(servers - a) * t / mean_service_s)``. Staffing picks the
fewest servers that keep the latter within a budget: the classical call-centre rule, used here for the
forecast part of an exclusive workload's fleet (autoscale/replica.py).
"""

from __future__ import annotations

import math

MAX_SERVERS = 100_000


def erlang_c(servers: int, load: float) -> float:
    """Probability that an arrival finds every one of ``servers`` busy (1.0 when ``load >= servers``)."""
    if load <= 0.0:
        return 0.0
    if servers <= load:
        return 1.0
    b = 1.0  # Erlang B by its stable recursion
    for k in range(1, servers + 1):
        b = load * b / (k + load * b)
    return servers * b / (servers - load * (1.0 - b))


def wait_exceeds(servers: int, load: float, wait_s: float, mean_service_s: float) -> float:
    """P(wait > ``wait_s``) in M/M/``servers`` with offered ``load`` and mean service ``mean_service_s``."""
    c = erlang_c(servers, load)
    if c >= 1.0:
        return 1.0
    if mean_service_s <= 0.0:
        return 0.0
    return c * math.exp(-(servers - load) * wait_s / mean_service_s)


def servers_for(load: float, wait_s: float, mean_service_s: float, budget: float, limit: int = MAX_SERVERS) -> int:
    """The fewest servers with P(wait > ``wait_s``) <= ``budget`` (0 when there is no load), or ``limit`` (at most
    ``MAX_SERVERS``) when more are needed; one pass of the Erlang B recursion, so O(min(answer, limit)). A load of
    ``limit`` or more needs more than ``limit`` servers (the answer exceeds the load): ``limit`` at once."""
    if load <= 0.0:
        return 0
    limit = min(limit, MAX_SERVERS)
    if not load < limit:
        return limit
    b = 1.0
    for n in range(1, limit + 1):
        b = load * b / (n + load * b)
        if n <= load:
            continue
        c = n * b / (n - load * (1.0 - b))
        tail = c * math.exp(-(n - load) * wait_s / mean_service_s) if mean_service_s > 0 else 0.0
        if tail <= budget:
            return n
    return limit
