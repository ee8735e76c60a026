"""``gpufleet k8s export|replay``: record a cluster's nodes and pods; replay them through the planner."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli.errors import user_errors
from gpufleet.cli.paths import output_file, write_output


def register(app: typer.Typer) -> None:
    k8s = typer.Typer(help="Kubernetes: record a cluster, replay it in-process.", no_args_is_help=True)
    app.add_typer(k8s, name="k8s")

    @k8s.command("export")
    @user_errors
    def export(
        out: Annotated[Path, typer.Option("--out", callback=output_file, help="JSON file to write")],
        kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig")] = None,
        in_cluster: Annotated[bool, typer.Option("--in-cluster")] = False,
    ) -> None:
        """Write every node and pod, as gpufleet observes them, to ``--out``."""
        from gpufleet.adapters.kubernetes.export import to_json
        from gpufleet.adapters.kubernetes.rest import Kube
        from gpufleet.adapters.kubernetes.view import ClusterView
        from gpufleet.cli.cmd_controller import connect

        kube = connect(kubeconfig, in_cluster)
        assert isinstance(kube, Kube)
        view = ClusterView(kube).start()
        obs = view.observation()
        view.stop()
        write_output(out, json.dumps(to_json(obs), indent=1) + "\n", "--out")
        typer.echo(f"{len(obs.nodes)} nodes, {len(obs.pods)} pods -> {out}")
        for key, err in sorted(view.bad_objects.items()):
            typer.echo(f"skipped {key}: {err}", err=True)

    @k8s.command("sync")
    @user_errors
    def sync(
        db: Annotated[str, typer.Option("--db", help="store URL (sqlite:///... or postgresql+psycopg://...)")],
        cluster: Annotated[str, typer.Option("--cluster", help="cluster id in the store")],
        kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig")] = None,
        in_cluster: Annotated[bool, typer.Option("--in-cluster")] = False,
        sku: Annotated[list[str] | None, typer.Option("--sku", help="PRODUCT=SKU_ID (repeatable)")] = None,
    ) -> None:
        """Write the cluster's GPU nodes and the pods on them into the store's node inventory."""
        import time

        from gpufleet.adapters.kubernetes.inventory import sync_inventory
        from gpufleet.adapters.kubernetes.rest import Kube
        from gpufleet.adapters.kubernetes.view import ClusterView
        from gpufleet.adapters.sql.engine import make_engine, safe_url
        from gpufleet.adapters.sql.migrate import ensure_migrated
        from gpufleet.cli.cmd_controller import connect, sku_pairs

        pairs = sku_pairs(sku)
        engine = make_engine(db)
        ensure_migrated(engine, safe_url=safe_url(engine))
        kube = connect(kubeconfig, in_cluster)
        assert isinstance(kube, Kube)
        view = ClusterView(kube).start()
        obs = view.observation()
        view.stop()
        r = sync_inventory(engine, cluster, obs, sku_map=pairs, now_s=int(time.time()))
        typer.echo(json.dumps(dataclasses.asdict(r)))

    @k8s.command("quotas")
    @user_errors
    def quotas(
        spec: Annotated[Path, typer.Argument(help="fleet spec YAML: tiers, quotas, namespaces")],
        out: Annotated[
            Path | None, typer.Option("--out", callback=output_file, help="write the objects as YAML here")
        ] = None,
        apply: Annotated[bool, typer.Option("--apply", help="create/replace them in the cluster")] = False,
        kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig")] = None,
        in_cluster: Annotated[bool, typer.Option("--in-cluster")] = False,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="with --apply: record, change nothing")] = False,
        adopt: Annotated[
            bool,
            typer.Option("--adopt", help="with --apply: also replace objects of the same name gpufleet did not create"),
        ] = False,
    ) -> None:
        """Compile quotas and procurement tiers into Kueue and Karpenter objects; print, write or apply them. An
        existing object keeps what others put on its metadata (finalizers, labels, annotations); one without the
        label app.kubernetes.io/managed-by=gpufleet is someone else's and left as it is (not_ours, exit 1) unless
        --adopt."""
        import yaml

        from gpufleet.adapters.kubernetes.act import Actuator
        from gpufleet.adapters.kubernetes.fleetobjects import collection_path
        from gpufleet.adapters.kubernetes.fleetspec import load_fleet_spec
        from gpufleet.adapters.kubernetes.rest import Kube
        from gpufleet.cli.cmd_controller import connect

        objs = load_fleet_spec(spec)
        text = yaml.safe_dump_all(objs, sort_keys=False)
        if out is not None:
            write_output(out, text, "--out")
        if not apply:
            if out is None:
                typer.echo(text, nl=False)
            return
        kube = connect(kubeconfig, in_cluster)
        assert isinstance(kube, Kube)
        act = Actuator(kube, dry_run=dry_run)
        for o in objs:
            act.apply_object(collection_path(o), o, "quotas_compiled", adopt=adopt)
        for a in act.audit:
            typer.echo(f"{a['outcome']}: {a['target']}" + (f" ({a.get('message', '')})" if a.get("message") else ""))
        if any(a["outcome"] not in ("applied", "dry_run") for a in act.audit):
            raise typer.Exit(1)

    @k8s.command("replay")
    @user_errors
    def replay(
        export_file: Annotated[Path, typer.Argument(help="file written by `gpufleet k8s export`")],
        policy: Annotated[str, typer.Option("--policy")] = "gpufleet",
        from_scratch: Annotated[bool, typer.Option("--from-scratch", help="re-place bound pods too")] = False,
    ) -> None:
        """What-if: decide the recorded pods with ``--policy`` in-process, serving replicas spread over nodes with the
        loop's replica spread as the controller does; print the unallocated GPUs."""
        from gpufleet.adapters.kubernetes.controller import loop_replica_spread
        from gpufleet.adapters.kubernetes.export import load_export
        from gpufleet.control.binding import BindingPlanner

        obs = load_export(export_file)
        pods = tuple(
            dataclasses.replace(p, node="", scheduler_name="replay") if from_scratch or not p.node else p
            for p in obs.pods
            if p.active
        )
        pods = tuple(dataclasses.replace(p, scheduler_name="replay") if not p.node else p for p in pods)
        planner = BindingPlanner(scheduler_name="replay", policy=policy, spread=loop_replica_spread())
        plan = planner.plan(dataclasses.replace(obs, pods=pods))
        result = {
            "policy": policy,
            "binds": len(plan.binds),
            "unschedulable": len(plan.unschedulable),
            "unallocated_gpu_milli": planner.unallocated_gpu_milli(),
        }
        typer.echo(json.dumps(result))
