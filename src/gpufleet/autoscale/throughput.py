"""Token-throughput model of one serving replica (see docs/autoscale.md for the derivation of the defaults).

A replica under continuous batching with chunked prefill (vLLM, Sarathi-Serve) runs steps that mix the
running requests' decode tokens with chunks of waiting prompts under one token budget. When a queue exists
(the only time capacity matters) every step is full, and a full step is compute-bound: each token, prefill or
decode, costs ``1 / compute_tokens_per_s`` of the replica, and a decode token also reads its sequence's KV
cache (``context * kv_bytes_per_token / memory_bytes_per_s``). So one request costs

    work_s = (context + generated) / compute_tokens_per_s
             + generated * (context + generated / 2) * kv_bytes_per_token / memory_bytes_per_s

replica-seconds, and a replica serves ``1 / work_s`` requests per second at 100% busy. The weight read of a
step (the memory-bound floor of decode at small batches) is amortized over the step's tokens and does not
limit a busy replica.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.domain.errors import ValidationError


@dataclass(frozen=True, slots=True)
class ReplicaThroughputModel:
    """Aggregate token rates of one replica.

    Defaults: a 70B-parameter dense model (Llama-3-70B shape: 80 layers, 8 KV heads of 128) in BF16 on
    4 x H100 SXM 80GB (tensor parallel 4), served with chunked prefill.
      compute_tokens_per_s: 2 * 70e9 FLOP per token; 4 x 989 TFLOP/s dense BF16 at ~50% MFU -> ~14,000
        tokens/s, prefill and decode tokens alike in a full mixed step.
      kv_bytes_per_token: 2 (K, V) * 80 layers * 8 heads * 128 * 2 bytes = 327,680 bytes.
      memory_bytes_per_s: 4 x 3.35 TB/s HBM3 at ~70% achieved -> 9.38e12 bytes/s.
      default_context_tokens / default_generated_tokens: request shape for rate-only traces (no token counts).
    """

    gpus_per_replica: int = 4
    compute_tokens_per_s: float = 14_000.0
    kv_bytes_per_token: float = 327_680.0
    memory_bytes_per_s: float = 9.38e12
    default_context_tokens: float = 1_000.0
    default_generated_tokens: float = 250.0

    def __post_init__(self) -> None:
        if self.gpus_per_replica < 1:
            raise ValidationError("gpus_per_replica", f"must be >= 1, got {self.gpus_per_replica}")
        if self.compute_tokens_per_s <= 0 or self.memory_bytes_per_s <= 0 or self.kv_bytes_per_token < 0:
            raise ValidationError("tokens_per_s", "compute and memory rates must be > 0, KV bytes >= 0")

    def work_s(self, context_tokens: npt.ArrayLike, generated_tokens: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Replica-seconds of work for each request (compute of all its tokens + KV reads of its decode)."""
        ctx = np.asarray(context_tokens, dtype=np.float64)
        gen = np.asarray(generated_tokens, dtype=np.float64)
        if np.any(ctx < 0) or np.any(gen < 0):
            raise ValidationError("tokens", "token counts must be >= 0")
        compute = (ctx + gen) / self.compute_tokens_per_s
        kv = gen * (ctx + gen / 2.0) * self.kv_bytes_per_token / self.memory_bytes_per_s
        return np.asarray(compute + kv, dtype=np.float64)

    @property
    def default_work_s(self) -> float:
        return float(self.work_s(self.default_context_tokens, self.default_generated_tokens))

    def rps_per_replica(self, mean_work_s: float | None = None) -> float:
        """Requests per second one replica serves at 100% busy for requests of ``mean_work_s`` each."""
        w = self.default_work_s if mean_work_s is None else mean_work_s
        if w <= 0:
            raise ValidationError("mean_work_s", f"must be > 0, got {w}")
        return 1.0 / w
