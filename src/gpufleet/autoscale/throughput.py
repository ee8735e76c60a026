"""Token-throughput model of one serving replica (see docs/autoscale.md for the derivation of the defaults).

A replica under continuous batching (vLLM-like) is throughput-bound, not slot-bound: it spends
``context_tokens / prefill_tokens_per_s`` of its time on a request's prefill and
``generated_tokens / decode_tokens_per_s`` on its decode, where both rates are the replica's aggregate rates
at a saturating batch. So one request costs ``work_s`` replica-seconds and a replica serves ``1 / work_s`` rps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.domain.errors import ValidationError


@dataclass(frozen=True, slots=True)
class ReplicaThroughputModel:
    """Aggregate token rates of one replica.

    Defaults: a 70B-parameter model in BF16 on 4 x H100 80GB (tensor parallel 4), as served by vLLM.
      prefill_tokens_per_s: compute-bound; 2 * 70e9 FLOP per token, 4 x 989 TFLOP/s at ~50% MFU -> ~14,000.
      decode_tokens_per_s: memory-bound; 140 GB of weights read per step over 4 x 3.35 TB/s at ~70% of peak
        -> ~15 ms per step; at a batch of ~64 sequences -> ~4,000 tokens/s.
      default_context_tokens / default_generated_tokens: request shape for rate-only traces (no token counts).
    """

    gpus_per_replica: int = 4
    prefill_tokens_per_s: float = 14_000.0
    decode_tokens_per_s: float = 4_000.0
    default_context_tokens: float = 1_000.0
    default_generated_tokens: float = 250.0

    def __post_init__(self) -> None:
        if self.gpus_per_replica < 1:
            raise ValidationError("gpus_per_replica", f"must be >= 1, got {self.gpus_per_replica}")
        if self.prefill_tokens_per_s <= 0 or self.decode_tokens_per_s <= 0:
            raise ValidationError("tokens_per_s", "prefill and decode rates must be > 0")

    def work_s(self, context_tokens: npt.ArrayLike, generated_tokens: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Replica-seconds of work for each request."""
        ctx = np.asarray(context_tokens, dtype=np.float64)
        gen = np.asarray(generated_tokens, dtype=np.float64)
        return ctx / self.prefill_tokens_per_s + gen / self.decode_tokens_per_s

    @property
    def default_work_s(self) -> float:
        return float(self.work_s(self.default_context_tokens, self.default_generated_tokens))

    def rps_per_replica(self, mean_work_s: float | None = None) -> float:
        """Requests per second one replica serves at 100% busy for requests of ``mean_work_s`` each."""
        w = self.default_work_s if mean_work_s is None else mean_work_s
        if w <= 0:
            raise ValidationError("mean_work_s", f"must be > 0, got {w}")
        return 1.0 / w
