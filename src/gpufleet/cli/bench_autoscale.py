"""``gpufleet bench autoscale``: replica policies replayed through the same queueing model in one run."""

from __future__ import annotations

import json
import platform
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.autoscale.throughput import ReplicaThroughputModel
from gpufleet.bench.autoscale import EARLY_S, BenchSettings, run, to_json, verdict
from gpufleet.bench.autoscale_requests import RequestColumns, parse_where
from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file, write_output
from gpufleet.domain.errors import ValidationError


class QueueModel(StrEnum):
    batched = "batched"
    exclusive = "exclusive"


@user_errors
def bench_autoscale(
    trace: Annotated[
        Path,
        typer.Option(
            "--trace", help="Azure LLM trace CSV, generic series CSV of rps, or per-request CSV (--time-column)"
        ),
    ],
    cold_start_s: Annotated[float, typer.Option("--cold-start-s", help="replica cold start, seconds")] = 120.0,
    slo_s: Annotated[float, typer.Option("--slo-s", help="SLO on queue wait, seconds")] = 2.0,
    json_path: Annotated[
        Path | None, typer.Option("--json", callback=output_file, help="write the results as JSON here")
    ] = None,
    series: Annotated[str | None, typer.Option("--series", help="only this series_id of a series file")] = None,
    seed: Annotated[int, typer.Option("--seed", help="seed of the sub-window Poisson arrivals")] = 0,
    target_utilization: Annotated[
        float, typer.Option("--target-utilization", help="shared per-replica target utilization")
    ] = 0.8,
    keep_zero_windows: Annotated[
        bool, typer.Option("--keep-zero-windows", help="treat empty windows of a busy series as demand, not gaps")
    ] = False,
    no_oracle: Annotated[
        bool, typer.Option("--no-oracle", help="skip the clairvoyant reference row (analysis only, not causal)")
    ] = False,
    time_column: Annotated[
        str | None, typer.Option("--time-column", help="per-request CSV: the arrival-time column")
    ] = None,
    work_column: Annotated[
        str | None,
        typer.Option("--work-column", help="per-request CSV: the column of measured service seconds on one replica"),
    ] = None,
    where: Annotated[
        list[str] | None,
        typer.Option("--where", help="per-request CSV: keep rows with COLUMN=VALUE (repeatable, all must hold)"),
    ] = None,
    group_by: Annotated[
        str | None, typer.Option("--group-by", help="per-request CSV: one trace per value of this column")
    ] = None,
    group: Annotated[
        list[str] | None, typer.Option("--group", help="with --group-by: replay this group (repeatable)")
    ] = None,
    top_groups: Annotated[
        int, typer.Option("--top-groups", min=0, help="with --group-by: replay the N groups with the most requests")
    ] = 0,
    gpus_per_replica: Annotated[
        int | None,
        typer.Option(
            "--gpus-per-replica",
            min=1,
            help="GPUs of one replica (GPU-hours = replica-hours x this); default 1 for a per-request CSV "
            "(its service times were measured on one serving replica), else 4 (the token model's 70B on 4 x H100)",
        ),
    ] = None,
    queue: Annotated[
        QueueModel,
        typer.Option(
            "--queue",
            help="service model of a replica: batched (continuous batching, an LLM; the default) or exclusive "
            "(one request per replica at a time, e.g. image diffusion; needs per-request arrivals; no oracle row)",
        ),
    ] = QueueModel.batched,
    warm_start_min: Annotated[
        list[float] | None,
        typer.Option(
            "--warm-start-min",
            help="analysis row: gpufleet started warm at static_peak's size for this many minutes (repeatable)",
        ),
    ] = None,
) -> None:
    """Replay a request trace through GPU replicas under gpufleet, static_peak, hpa and kpa (and analysis rows:
    the clairvoyant oracle, optional warm starts; never baselines of the done-when check)."""
    st = BenchSettings(
        cold_start_s=cold_start_s,
        slo_s=slo_s,
        target_utilization=target_utilization,
        seed=seed,
        oracle=not no_oracle,
        warm_start_min=tuple(warm_start_min or ()),
        queue="exclusive" if queue is QueueModel.exclusive else "batched",
    )
    requests = _request_columns(time_column, work_column, where, group_by, group, top_groups)
    if requests is None:
        gpus = ReplicaThroughputModel().gpus_per_replica if gpus_per_replica is None else gpus_per_replica
    else:
        gpus = 1 if gpus_per_replica is None else gpus_per_replica
    runs = run(
        trace,
        st=st,
        model=ReplicaThroughputModel(gpus_per_replica=gpus),
        series_id=series,
        impute_gaps=not keep_zero_windows,
        requests=requests,
    )
    if json_path is not None:  # before the output: a failure to print must not lose the run
        payload = [to_json(r) for r in runs]
        write_output(json_path, json.dumps(payload[0] if len(payload) == 1 else payload, indent=2) + "\n", "--json")
    con = Console(width=200)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    con.print(f"{stamp} on {platform.node()} ({platform.machine()}, Python {platform.python_version()})")
    for r in runs:
        t = Table(
            title=f"{r.trace.trace_id}: cold start {cold_start_s:g} s, SLO wait <= {slo_s:g} s, "
            f"{r.rps_per_replica:.2f} rps/replica at 100%, {gpus} GPU(s)/replica, {st.queue} queue, "
            f"gap windows imputed: {r.trace.gap_windows}"
        )
        for col in (
            "policy",
            "GPU-h",
            "vs static_peak",
            "SLO attainment",
            "worst hour SLO",
            "cold starts",
            "mean replicas",
            "p99 wait s",
            "2nd half GPU-h",
            "2nd half SLO",
            f"GPU-h 0-{EARLY_S / 60:g} min",
            f"SLO 0-{EARLY_S / 60:g} min",
            "sim s",
        ):
            t.add_column(col, justify="left" if col == "policy" else "right")
        base = r.results["static_peak"].gpu_hours
        rows = [(n, n, x) for n, x in r.results.items()] + [(n, _label(n), x) for n, x in r.analysis.items()]
        for name, label, x in rows:
            early_h, early_slo = x.window(0.0, EARLY_S)
            t.add_row(
                label,
                f"{x.gpu_hours:,.1f}",
                f"{x.gpu_hours / base:.3f}" if base else "-",
                f"{x.slo_attainment:.4f}",
                f"{x.worst_hour_slo:.4f}",
                f"{x.cold_starts:,}",
                f"{x.mean_replicas:.1f}",
                f"{x.p99_wait_s:.1f}",
                f"{x.gpu_hours_2nd_half:,.1f}",
                f"{x.slo_attainment_2nd_half:.4f}",
                f"{early_h:,.1f}",
                f"{early_slo:.4f}",
                f"{r.wall_s[name]:.1f}",
            )
        con.print(t)
        con.print(
            f"static_peak = {r.static_replicas} replicas: the fewest constant replicas with >= "
            f"{st.static_attainment:.0%} SLO attainment in every hour of the trace"
        )
        if r.oracle is not None:
            o = r.oracle
            con.print(
                f"oracle = clairvoyant schedule (knows the whole trace; NOT a causal policy, not a baseline): "
                f"{o.result.gpu_hours:,.1f} GPU-h at {o.result.slo_attainment:.4f} "
                f"({o.result.gpu_hours / base:.3f} of static_peak); no {o.bucket_s:g} s-bucket schedule meets "
                f"{st.oracle_target:.0%} with fewer than {o.lower_bound_gpu_h:,.1f} GPU-h "
                f"({o.lower_bound_gpu_h / base:.3f}; Lagrangian bound of the per-bucket miss estimate); "
                f"{o.replays} replays, {'no-overload floor' if o.floor else 'no floor'}"
                + ("" if o.feasible else f"; NO schedule found at >= {st.oracle_target:.0%}")
            )
        ok, why = verdict(r)
        con.print(f"done-when ({r.trace.trace_id}): {'PASS' if ok else 'FAIL'} — {why}")
    if json_path is not None:
        con.print(f"wrote {json_path}")


def _request_columns(
    time_column: str | None,
    work_column: str | None,
    where: list[str] | None,
    group_by: str | None,
    group: list[str] | None,
    top_groups: int,
) -> RequestColumns | None:
    """The per-request options as one value (None: the file is in the Azure or the series format)."""
    if time_column is None and work_column is None:
        if where or group_by or group or top_groups:
            raise ValidationError("time_column", "--where/--group-by/--group/--top-groups need --time-column")
        return None
    if time_column is None or work_column is None:
        raise ValidationError("time_column", "a per-request CSV needs both --time-column and --work-column")
    return RequestColumns(
        time_column=time_column,
        work_column=work_column,
        where=parse_where(where or []),
        group_column=group_by,
        groups=tuple(group or ()),
        top_groups=top_groups,
    )


def _label(name: str) -> str:
    return "oracle (not causal)" if name == "oracle" else f"{name} (analysis)"


def register(app: typer.Typer) -> None:
    app.command("autoscale")(bench_autoscale)
