"""The ``--seeds`` option of the benchmarks: ``A-B`` (inclusive) or a comma list of distinct non-negative integers."""

from __future__ import annotations

from gpufleet.domain.errors import ValidationError

MAX_SEEDS = 1000


def parse_seeds(spec: str) -> list[int]:
    """``"42-51"`` or ``"42,43,50"`` -> the seeds; empty, reversed, negative, repeated or more than MAX_SEEDS is an
    error (a repeated seed would count one sample twice in the means, spreads and confidence intervals)."""
    text = spec.strip()
    try:
        if "-" in text:
            lo, hi = (int(x) for x in text.split("-", 1))
            seeds = list(range(lo, hi + 1)) if 0 <= lo <= hi and hi - lo < MAX_SEEDS else []
        else:
            seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        seeds = []
    if not seeds or min(seeds) < 0 or len(seeds) > MAX_SEEDS:
        raise ValidationError(
            "--seeds", f"expected A-B (A <= B) or a comma list of 1..{MAX_SEEDS} integers >= 0, got {spec!r}"
        )
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ValidationError("--seeds", f"seed {repeated[0]} is repeated in {spec!r}; each seed is one sample")
    return seeds
