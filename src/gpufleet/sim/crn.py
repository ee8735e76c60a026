"""Common random numbers for node failures and spot preemptions.

A node's failure (and preemption) clock is drawn from a hash of the run's seed and the node's identity - its
pool and its launch ordinal in that pool - and of how many times it has come alive, not from one stream shared
by every node in event order. Two control policies run with the same seed then see the same failures on the same
nodes (every reserved node, and the k-th launched node of a pool), instead of draws that shift as soon as one
policy launches a node the other does not: their difference is measured with far less noise. Each draw is still
an independent exponential (splitmix64 is a full-avalanche 64-bit mixer; keys never repeat within a run).
"""

from __future__ import annotations

import math

MASK = (1 << 64) - 1
FAIL, PREEMPT = 1, 2
_TWO53 = float(1 << 53)


def _mix(x: int) -> int:
    """splitmix64's finalizer."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def keyed_prefix(seed: int, *keys: int) -> int:
    """The mixed state after ``seed`` and ``keys``: draws that share them (one stream of one run) start from it."""
    x = _mix(seed & MASK)
    for k in keys:
        x = _mix(x ^ (k & MASK))
    return x


def keyed_uniform(seed: int, *keys: int) -> float:
    """A uniform draw in (0, 1) determined by ``seed`` and ``keys`` (non-negative integers)."""
    return ((keyed_prefix(seed, *keys) >> 11) + 0.5) / _TWO53


def uniform_after(prefix: int, a: int, b: int) -> float:
    """``keyed_uniform(seed, *keys, a, b)`` from ``keyed_prefix(seed, *keys)``, its two mixes written out (the
    simulator's ETA errors draw one per run: a hot path)."""
    x = ((prefix ^ (a & MASK)) + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    x = (((x ^ (x >> 31)) ^ (b & MASK)) + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return (((x ^ (x >> 31)) >> 11) + 0.5) / _TWO53


def keyed_exponential(mean: float, seed: int, *keys: int) -> float:
    """An exponential draw with the given mean, determined by ``seed`` and ``keys``."""
    return -mean * math.log(keyed_uniform(seed, *keys))
