"""Quieter request traces, derived from a public one by our own code (seeded thinning).

Every public serving trace in ``../shared/data`` is busy enough that a static fleet needs several replicas;
issue 21's held-out run found gpufleet's autoscaler dearest where traffic is low (a trace two replicas could
serve: 1.12x static peak's GPU-hours, six cold starts). Keeping each request of a trace with probability
``keep`` (independently, seeded) gives the same burst shapes at a fraction of the rate: a Poisson thinning,
so the quiet trace is what the same users would send with ``keep`` of their number.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpufleet.adapters.inputs import read_input_text
from gpufleet.domain.errors import ValidationError


@dataclass(frozen=True, slots=True)
class Thinning:
    keep: float  # share of requests kept, in (0, 1]
    seed: int = 0

    @property
    def suffix(self) -> str:
        return f"+keep{round(100 * self.keep)}"

    def validate(self) -> None:
        if not 0.0 < self.keep <= 1.0:
            raise ValidationError("keep", f"must be in (0, 1], got {self.keep}")


# the quiet traces `gpufleet bench generalize` replays beside the Azure code trace (fixed before their first run)
GENERALIZE_THINNING = (Thinning(0.10, seed=1), Thinning(0.25, seed=2))


def thin_requests(src: Path, thinning: Thinning, out_dir: Path) -> Path:
    """Write ``src`` (a per-request CSV with a header) with each data row kept with probability ``keep``;
    returns the new file, named ``<stem><suffix>.csv`` in ``out_dir``."""
    thinning.validate()
    text = read_input_text(src, "trace")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if len(rows) < 2:
        raise ValidationError("trace", "no request rows", str(src))
    rng = np.random.default_rng(thinning.seed)
    keep = rng.random(len(rows) - 1) < thinning.keep
    out = out_dir / f"{src.stem}{thinning.suffix}.csv"
    with out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(rows[0])
        w.writerows(r for r, k in zip(rows[1:], keep, strict=True) if k)
    return out
