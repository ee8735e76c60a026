"""Derived demand series for the procurer, our own and seeded: probes, not stage rows.

``step_down``: 8 weeks hourly, two weeks at 100 GPUs +-20 % over the day (noise sd 2 GPUs), then 10
(docs/procure.md, "Known limit (session 35): a step down"). Replay it as

    python scripts/procure_probes.py OUT_DIR
    gpufleet bench procure --demand OUT_DIR/step_down.csv --term-hours 168 --lead-hours 24
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def write_step_down(out: Path, seed: int = 5, weeks: int = 8) -> None:
    """The step-down series (``timestamp,series_id,value``, GPUs per hour)."""
    rng = np.random.default_rng(seed)
    h = np.arange(24 * 7 * weeks)
    level = np.where(h < 24 * 14, 100.0, 10.0)
    v = np.maximum(0, level * (1 + 0.2 * np.sin(2 * np.pi * ((h % 24) / 24 - 0.25))) + rng.normal(0, 2, len(h)))
    t = pd.date_range("2024-03-01", periods=len(h), freq="1h")
    pd.DataFrame({"timestamp": t.strftime("%Y-%m-%dT%H:%M:%SZ"), "series_id": "decl", "value": v.round(2)}).to_csv(
        out, index=False
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path, help="where the CSV is written")
    a = ap.parse_args(argv)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    write_step_down(a.out_dir / "step_down.csv")
    print(f"wrote {a.out_dir / 'step_down.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
