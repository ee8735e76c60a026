"""``gpufleet controller``: run the Kubernetes world of the loop (secondary scheduler, leader-elected)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from gpufleet.cli.errors import user_errors
from gpufleet.domain.errors import ValidationError


def connect(kubeconfig: Path | None, in_cluster: bool, pool_size: int = 32) -> object:
    """A :class:`Kube` for the CLI; bad or missing config becomes a clear error (exit 2)."""
    from gpufleet.adapters.kubernetes.rest import ApiError, Kube

    if kubeconfig is None and not in_cluster:
        raise ValidationError("--kubeconfig", "give a kubeconfig path or --in-cluster")
    if kubeconfig is not None and not kubeconfig.is_file():
        raise ValidationError("--kubeconfig", f"file not found: {kubeconfig}")
    try:
        kube = Kube.from_kubeconfig(str(kubeconfig) if kubeconfig else None, in_cluster=in_cluster, pool_size=pool_size)
        kube.get("/version")
    except ApiError as exc:
        raise ValidationError("--kubeconfig", f"API server unreachable or refused: {exc}") from None
    except Exception as exc:  # the official client's ConfigException and YAML errors
        raise ValidationError("--kubeconfig", f"cannot load Kubernetes config: {exc}") from None
    return kube


def _gauge_query(given: str, default: str) -> str:
    """``--queue-query`` / ``--running-query`` / ``--slo-miss-query``: empty is the default, ``off`` is not read."""
    return "" if given.strip().lower() == "off" else (given or default)


def _controller_policy(value: str) -> str:
    """Checked at start, not at the first tick after the Lease is taken: ``fgd`` needs a workload target the
    controller does not have."""
    from gpufleet.schedule import POLICY_NAMES

    choices = [p for p in POLICY_NAMES if p != "fgd"]
    if value not in choices:
        raise typer.BadParameter(f"{value!r}: choose one of {', '.join(choices)}")
    return value


def register(app: typer.Typer) -> None:
    @app.command("controller")
    @user_errors
    def controller(
        kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="kubeconfig file")] = None,
        in_cluster: Annotated[bool, typer.Option("--in-cluster", help="use the pod's service account")] = False,
        scheduler_name: Annotated[str, typer.Option("--scheduler-name")] = "gpufleet",
        policy: Annotated[
            str, typer.Option("--policy", callback=_controller_policy, help="packing policy (not fgd: no target)")
        ] = "gpufleet",
        lease_namespace: Annotated[str, typer.Option("--lease-namespace")] = "kube-system",
        lease_name: Annotated[str, typer.Option("--lease-name")] = "gpufleet-controller",
        lease_duration_s: Annotated[int, typer.Option("--lease-duration-s", min=3)] = 15,
        identity: Annotated[str, typer.Option("--identity", help="Lease holder id (default host-pid)")] = "",
        dry_run: Annotated[bool, typer.Option("--dry-run", help="decide and record; change nothing")] = False,
        audit: Annotated[Path | None, typer.Option("--audit", help="append audit events (JSON lines) here")] = None,
        events: Annotated[bool, typer.Option("--events", help="also write core/v1 Events")] = False,
        bind_workers: Annotated[int, typer.Option("--bind-workers", min=1, max=256)] = 16,
        consolidate_every_s: Annotated[
            float,
            typer.Option("--consolidate-every-s", min=0, max=86_400, help="drain underused nodes this often (0 = off)"),
        ] = 0.0,
        max_moves_per_hour: Annotated[int, typer.Option("--max-moves-per-hour", min=0)] = 10,
        release_every_s: Annotated[
            float,
            typer.Option(
                "--release-every-s",
                min=0,
                max=86_400,
                help="release idle launched GPU nodes the loop's node scaler lets go, this often (0 = off)",
            ),
        ] = 0.0,
        node_start_s: Annotated[
            int,
            typer.Option(
                "--node-start-s", min=0, max=86_400, help="seconds a launched GPU node takes to join (<= a day)"
            ),
        ] = 600,
        buffer_pods: Annotated[
            bool,
            typer.Option(
                "--buffer-pods/--no-buffer-pods",
                help="with --release-every-s: top up the loop's start buffer with placeholder pods Karpenter "
                "launches nodes for (in --lease-namespace)",
            ),
        ] = True,
        buffer_image: Annotated[
            str, typer.Option("--buffer-image", help="the placeholder pods' pause image")
        ] = "registry.k8s.io/pause:3.9",
        preemption: Annotated[
            bool,
            typer.Option(
                "--preemption/--no-preemption",
                help="evict strictly lower-priority work (checkpoint first) for pods and gangs that do not fit",
            ),
        ] = True,
        max_preemptions_per_tick: Annotated[int, typer.Option("--max-preemptions-per-tick", min=1)] = 4,
        checkpoint_timeout_s: Annotated[
            float,
            typer.Option(
                "--checkpoint-timeout-s",
                min=0,
                max=86_400,
                help="how long a checkpointable pod has to answer the checkpoint handshake before consolidation "
                "or preemption gives up on evicting it",
            ),
        ] = 120.0,
        eviction_grace_s: Annotated[
            int | None,
            typer.Option(
                "--eviction-grace-s",
                min=0,
                max=86_400,
                help="termination grace of the pods consolidation and preemption evict, at most a day (default: each "
                "pod's own terminationGracePeriodSeconds)",
            ),
        ] = None,
        replica_spread: Annotated[
            bool,
            typer.Option(
                "--replica-spread/--no-replica-spread",
                help="spread a serving Deployment's replicas over nodes with the control loop's replica spread",
            ),
        ] = True,
        db: Annotated[
            str,
            typer.Option(
                "--db", help="store URL: sync node/pod inventory into it (default with --cluster: GPUFLEET_DB_URL)"
            ),
        ] = "",
        cluster: Annotated[str, typer.Option("--cluster", help="cluster id in the store (with --db)")] = "",
        sync_every_s: Annotated[float, typer.Option("--sync-every-s", min=1, max=86_400)] = 60.0,
        sku: Annotated[
            list[str] | None,
            typer.Option(
                "--sku",
                help="PRODUCT=SKU_ID (repeatable): a GPU product's catalog SKU, for the inventory sync and "
                "the usage metering (default: by name tokens)",
            ),
        ] = None,
        meter_every_s: Annotated[
            float,
            typer.Option(
                "--meter-every-s",
                min=0,
                max=86_400,
                help="meter each workload's GPUs into the store's hourly utilization records this often (needs "
                "--db and --cluster; with --prometheus the records carry DCGM utilization, without it their "
                "utilization is not measured; 0 = off)",
            ),
        ] = 0.0,
        node_limits_every_s: Annotated[
            float,
            typer.Option(
                "--node-limits-every-s",
                min=0,
                max=86_400,
                help="set the GPU limits of gpufleet's Karpenter NodePools from the store's active reservations and "
                "quotas this often (needs --db and --cluster; 0 = off)",
            ),
        ] = 0.0,
        node_limits_selector: Annotated[
            str,
            typer.Option(
                "--node-limits-selector", help="label selector of the NodePools whose limits follow the store"
            ),
        ] = "app.kubernetes.io/managed-by=gpufleet",
        run_for_s: Annotated[
            float, typer.Option("--run-for-s", min=0, max=315_360_000, help="stop after this long (0 = until signal)")
        ] = 0,
        health_port: Annotated[
            int,
            typer.Option("--health-port", min=0, max=65535, help="serve /healthz and /metrics on this port (0 = off)"),
        ] = 0,
        health_stale_s: Annotated[
            float,
            typer.Option(
                "--health-stale-s", min=1, max=86_400, help="/healthz fails when the loop has not turned for this long"
            ),
        ] = 120.0,
        scale_every_s: Annotated[
            float,
            typer.Option(
                "--scale-every-s", min=0, max=86_400, help="scale opted-in serving Deployments this often (0 = off)"
            ),
        ] = 0.0,
        scale_round_s: Annotated[
            float,
            typer.Option(
                "--scale-round-s",
                min=0,
                max=86_400,
                help="a scaling round's Prometheus reads end by this long (0: its period)",
            ),
        ] = 0.0,
        prometheus: Annotated[
            str, typer.Option("--prometheus", help="Prometheus URL: request rates, and DCGM utilization for metering")
        ] = "",
        dcgm_cluster_label: Annotated[
            str,
            typer.Option(
                "--dcgm-cluster-label",
                help="metering reads the DCGM series whose label of this name is --dcgm-cluster, and those without "
                "it (a Prometheus several clusters share; '' = every series)",
            ),
        ] = "cluster",
        dcgm_cluster: Annotated[
            str,
            typer.Option("--dcgm-cluster", help="that label's value for this cluster (default: --cluster)"),
        ] = "",
        rps_query: Annotated[
            str,
            typer.Option(
                "--rps-query", help="default PromQL for a Deployment's request rate ($namespace, $deployment)"
            ),
        ] = "",
        queue_query: Annotated[
            str,
            typer.Option("--queue-query", help="default PromQL for its requests waiting now ('off': not read)"),
        ] = "",
        running_query: Annotated[
            str,
            typer.Option("--running-query", help="default PromQL for its requests in service now ('off': not read)"),
        ] = "",
        scale_history_s: Annotated[
            float,
            typer.Option(
                "--scale-history-s",
                min=0,
                max=366 * 86_400,
                help="a Deployment's policy starts from this much rate history (0: none)",
            ),
        ] = 86_400.0,
        react_every_s: Annotated[
            float,
            typer.Option(
                "--react-every-s",
                min=0,
                max=86_400,
                help="between scale periods, scale up on a growing queue this often (0: off)",
            ),
        ] = 15.0,
        slo_miss_query: Annotated[
            str,
            typer.Option(
                "--slo-miss-query", help="default PromQL for its requests past the SLO over a scale period (none)"
            ),
        ] = "",
    ) -> None:
        """Observe the cluster, bind pods with schedulerName=gpufleet, act only while holding the Lease."""
        from gpufleet.adapters.kubernetes.controller import Controller, ControllerConfig, loop_replica_spread
        from gpufleet.adapters.kubernetes.rest import Kube
        from gpufleet.adapters.kubernetes.workloads import (
            DEFAULT_QUEUE_QUERY,
            DEFAULT_RPS_QUERY,
            DEFAULT_RUNNING_QUERY,
        )
        from gpufleet.cli.service_settings import warn_unknown_variables

        warn_unknown_variables()  # as `serve` does: a misspelt GPUFLEET_DB_URL is not ignored without a word
        if scale_every_s > 0 and not prometheus:
            raise ValidationError("--prometheus", "replica scaling (--scale-every-s) reads request rates from it")
        db_option = "--db"
        if cluster and not db:  # the store's URL as the API reads it (a Secret's env var: not on the command line)
            db, db_option = os.environ.get("GPUFLEET_DB_URL", ""), "GPUFLEET_DB_URL"
        if bool(db) != bool(cluster):
            raise ValidationError("--db/--cluster", "give both to sync inventory into the store, or neither")
        if meter_every_s > 0 and not db:
            raise ValidationError("--db/--cluster", "usage metering (--meter-every-s) writes into the store's cluster")
        if node_limits_every_s > 0 and not db:
            raise ValidationError("--db/--cluster", "NodePool limits (--node-limits-every-s) read the store's cluster")
        pairs = sku_pairs(sku)
        if db:
            from sqlalchemy.exc import DBAPIError

            from gpufleet.service.settings import check_db_url

            try:
                check_db_url(db)  # as `serve` checks it: one line naming where it came from, never the URL
            except ValueError as exc:
                raise ValidationError(db_option, str(exc)) from None

            from gpufleet.adapters.sql.engine import make_engine, safe_url
            from gpufleet.adapters.sql.migrate import DatabaseUnavailable, ensure_migrated

            engine = make_engine(db)
            try:
                ensure_migrated(engine, safe_url=safe_url(engine))
                _check_store(engine, cluster, pairs)
            except (DatabaseUnavailable, DBAPIError) as exc:  # down now: binding must not wait for it
                why = str(exc).splitlines()[0]
                Console(stderr=True).print(f"warning: the store does not answer ({why}); the controller starts, "
                                           "its inventory syncs and metered hours are retried", highlight=False)  # fmt: skip
        kube = connect(kubeconfig, in_cluster, pool_size=bind_workers + 8)
        assert isinstance(kube, Kube)
        cfg = ControllerConfig(
            scheduler_name=scheduler_name, policy=policy, namespace=lease_namespace, lease_name=lease_name,
            identity=identity, lease_duration_s=lease_duration_s, renew_s=max(1.0, lease_duration_s / 5),
            dry_run=dry_run, events=events, audit_path=audit, bind_workers=bind_workers,
            consolidate_every_s=consolidate_every_s, max_moves_per_hour=max_moves_per_hour,
            release_every_s=release_every_s, node_start_s=node_start_s, buffer_pods=buffer_pods,
            buffer_image=buffer_image,
            preemption=preemption, max_preemptions_per_tick=max_preemptions_per_tick,
            checkpoint_timeout_s=checkpoint_timeout_s, eviction_grace_s=eviction_grace_s,
            replica_spread=loop_replica_spread() if replica_spread else None,
            store_url=db, inventory_cluster=cluster, sync_every_s=sync_every_s,
            scale_every_s=scale_every_s, scale_round_s=scale_round_s, prometheus_url=prometheus,
            dcgm_cluster_label=dcgm_cluster_label,
            dcgm_cluster=dcgm_cluster, rps_query=rps_query or DEFAULT_RPS_QUERY,
            queue_query=_gauge_query(queue_query, DEFAULT_QUEUE_QUERY),
            running_query=_gauge_query(running_query, DEFAULT_RUNNING_QUERY),
            slo_miss_query=_gauge_query(slo_miss_query, ""), scale_history_s=scale_history_s,
            react_every_s=react_every_s, meter_every_s=meter_every_s, sku_map=tuple(sorted(pairs.items())),
            health_port=health_port, health_stale_s=health_stale_s, node_limits_every_s=node_limits_every_s,
            node_limits_selector=node_limits_selector,
        )  # fmt: skip
        ctl = Controller(kube, cfg, usage_sink=_usage_sink(db) if meter_every_s > 0 else None).start()
        out = Console(stderr=True)
        out.print(f"gpufleet controller {ctl.identity}: scheduler {scheduler_name}, dry-run {dry_run}", highlight=False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: ctl.stop())
        if run_for_s > 0:
            timer = threading.Timer(run_for_s, ctl.stop)
            timer.daemon = True  # a loop ended early on an error must not wait for it to fire
            timer.start()
        try:
            ctl.run()
        except Exception as exc:  # the loop ended on an error (run() released the Lease): one line, not a traceback
            out.print(
                f"error: the controller stopped: {type(exc).__name__}: {exc}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(1) from None
        applied = sum(1 for a in ctl.act.audit if a["outcome"] in ("applied", "dry_run"))
        out.print(f"stopped: {applied} actions ({'recorded only' if dry_run else 'applied'})", highlight=False)
        if dry_run:
            for a in ctl.act.audit:
                typer.echo(f"would {a['action']} {a['target']} ({a['reason']}) {a.get('node', '')}".rstrip())


def _usage_sink(db: str) -> Callable[[Sequence[dict[str, object]]], tuple[int, list[str]]]:
    """The controller's usage records into the store through the ingest use case (its checks, its idempotent
    upsert, its audit event), as the principal ``controller`` (an ML-platform admin); the store's schema revision
    checked before the first write and again after a failed one (``RevisionGate``: the store may come back at
    another revision), a mismatch refused (DatabaseNotMigrated; the meter keeps the hours)."""
    from gpufleet.adapters.sql.engine import make_engine
    from gpufleet.adapters.sql.migrate import RevisionGate
    from gpufleet.service.auth import Actor, Role
    from gpufleet.service.clock import SystemClock
    from gpufleet.service.ingest import IngestService

    engine = make_engine(db)
    gate = RevisionGate(engine)
    ingest = IngestService(engine, SystemClock())
    actor = Actor("controller", Role.ML_PLATFORM_ADMIN, None)

    def sink(records: Sequence[dict[str, object]]) -> tuple[int, list[str]]:
        gate.check()
        try:
            return ingest.ingest_leaving_out(actor, records)
        except Exception:
            gate.reset()  # the store failed: check its revision again before the next write
            raise

    return sink


def sku_pairs(items: Sequence[str] | None) -> dict[str, str]:
    """``--sku PRODUCT=SKU_ID`` options as a map (a malformed one is a ValidationError naming ``--sku``)."""
    pairs: dict[str, str] = {}
    for item in items or []:
        product, eq, sku_id = item.partition("=")
        if not eq or not product or not sku_id:
            raise ValidationError("--sku", f"{item!r}: expected PRODUCT=SKU_ID")
        pairs[product] = sku_id
    return pairs


def _check_store(engine: Any, cluster: str, pairs: dict[str, str]) -> None:
    """Before the controller starts: the cluster is registered in the store (its inventory is written under it) and
    every mapped SKU id is in the store's catalog (``inventory.check_sku_map``)."""
    from sqlalchemy import select

    from gpufleet.adapters.kubernetes.inventory import check_sku_map
    from gpufleet.adapters.sql.models import ClusterRow, SkuRow

    with engine.connect() as c:
        if c.execute(select(ClusterRow.id).where(ClusterRow.id == cluster)).first() is None:
            raise ValidationError(
                "--cluster", f"cluster {cluster!r} is not in the store; register it first (POST /v1/clusters)"
            )
        check_sku_map(pairs, list(c.execute(select(SkuRow.id)).scalars()))
