"""``gpufleet bench binpack``: the FGD bin-packing protocol on openb pod lists (onto the openb node list or a node
inventory), every policy on the same seeds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.bench.binpack import RunResult, run_bench
from gpufleet.bench.binpack_mix import KINDS, MixVariant
from gpufleet.bench.binpack_pins import SPREADS, PinVariant
from gpufleet.bench.seeds import parse_seeds
from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file, write_output
from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.scheduler import POLICY_NAMES


def register(app: typer.Typer) -> None:
    @app.command("binpack")
    @user_errors
    def binpack(
        nodes: Annotated[
            Path, typer.Option("--nodes", help="node list CSV: openb, PAI 2020 machines or spot GPU nodes")
        ],
        pods: Annotated[Path, typer.Option("--pods", help="openb pod list CSV")],
        seeds: Annotated[str, typer.Option("--seeds", help="'42-51' or '42,43'")] = "42-51",
        policy: Annotated[str, typer.Option("--policy", help=f"one of {', '.join(POLICY_NAMES)} or 'all'")] = "all",
        json_path: Annotated[
            Path | None, typer.Option("--json", callback=output_file, help="write the summary as JSON here")
        ] = None,
        pin_share: Annotated[
            float | None,
            typer.Option("--pin-share", help="pin this share of GPU pods to GPU models first (0-1]; derived list"),
        ] = None,
        pin_spread: Annotated[
            str, typer.Option("--pin-spread", help=f"how pinned pods pick models: {', '.join(SPREADS)}")
        ] = "capacity",
        pin_seed: Annotated[int, typer.Option("--pin-seed", help="seed of the pinning draw")] = 0,
        mix: Annotated[
            str | None,
            typer.Option(
                "--mix",
                help=f"change the workload mix first, KIND:LEVEL with KIND one of {', '.join(KINDS)} "
                "(multigpu:0.5 = multi-GPU pods ask for half the GPUs; cpu:2 = twice the CPU-only pods)",
            ),
        ] = None,
        mix_seed: Annotated[int, typer.Option("--mix-seed", help="seed of the mix draw")] = 0,
    ) -> None:
        """Unallocated GPU % when arrived GPU demand reaches 100 % of capacity (FGD, ATC'23 protocol).

        With ``--pin-share`` the pod list is first rewritten so that that share of its GPU pods names GPU
        models (:mod:`gpufleet.bench.binpack_pins`); with ``--mix`` its mix of multi-GPU or CPU-only pods changes
        (:mod:`gpufleet.bench.binpack_mix`). FGD's target distribution is the rewritten list."""
        names = list(POLICY_NAMES) if policy == "all" else list(dict.fromkeys(p.strip() for p in policy.split(",")))
        for n in names:
            if n not in POLICY_NAMES:
                raise ValidationError("--policy", f"unknown policy {n!r}; choose from {', '.join(POLICY_NAMES)} or all")
        console = Console(stderr=True)

        def progress(r: RunResult) -> None:
            console.print(
                f"{r.policy:>10} seed {r.seed}: unallocated@100 {r.unallocated_gpu_pct_at_100:6.2f}%  "
                f"final alloc {r.final_allocation_pct:6.2f}%  ({r.seconds:.1f}s)",
                highlight=False,
            )

        pin = None
        if pin_share is not None:  # checked by pin_models (field named in the error)
            pin = PinVariant(pods.stem.removeprefix("openb_pod_list_"), pin_share, pin_spread, pin_seed)
        summary = run_bench(nodes, pods, parse_seeds(seeds), names, progress, pin=pin, mix=_mix(pods, mix, mix_seed))
        if json_path is not None:  # before the output: a failure to print must not lose the run
            write_output(json_path, json.dumps(summary, indent=2) + "\n", "--json")
        table = Table(title=f"binpack {summary['trace']} (seeds {seeds})")
        for col in ("policy", "unallocated % @100 (mean)", "sd", "final allocation %"):
            table.add_column(col)
        pol = summary["policies"]
        assert isinstance(pol, dict)
        for name, row in pol.items():
            u = row["unallocated_gpu_pct_at_100"]
            table.add_row(name, f"{u['mean']:.3f}", f"{u['sd']:.3f}", f"{row['final_allocation_pct']:.2f}")
        Console().print(table)


def _mix(pods: Path, spec: str | None, seed: int) -> MixVariant | None:
    """``--mix KIND:LEVEL`` as a variant of the list ``pods`` (the kind and level are checked by ``mix_pods``)."""
    if spec is None:
        return None
    kind, _, level = spec.partition(":")
    try:
        value = float(level)
    except ValueError:
        raise ValidationError("--mix", f"expected KIND:LEVEL such as multigpu:0.5 or cpu:2, got {spec!r}") from None
    return MixVariant(pods.stem.removeprefix("openb_pod_list_"), kind.strip(), value, seed)
