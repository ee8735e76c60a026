"""Issue #17 part A replayed against a running server: approval bypasses (items 1-3), viewers spending budgets
(4), a reused Idempotency-Key (14), absurd sizes (15), loose types (16), the seeds' request bodies (17) and
plans that re-buy what is held (18). Every name carries a per-run suffix, so the module can run again on the
same store."""

from __future__ import annotations

import datetime as dt
import secrets
import time
from collections.abc import Callable
from typing import Any

import httpx

from attacks.ctx import Ctx, Result

RESERVED = "aws/us-east-1/h100_80gb/reserved"
WEST = "aws/us-west-2/h100_80gb/reserved"


def _start(days: int = 30) -> str:
    day = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=days)
    return day.strftime("%Y-%m-%dT%H:%M:%SZ")


def _res(units: int, term: int, regions: list[str] | None = None) -> dict[str, Any]:
    return {"sku": "h100_80gb", "units": units, "start": _start(), "term_months": term,
            "regions": regions or ["us-east-1"]}  # fmt: skip


def _approve(c: httpx.Client, rid: str, **extra: Any) -> httpx.Response:
    return c.post(f"/v1/reservations/{rid}/approve", json={"budget_code": "AI-2026", **extra})


class _Run:
    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.sfx = secrets.token_hex(3)
        self.results: list[Result] = []

    def c(self, role: str, who: str, team: str | None = None) -> httpx.Client:
        return self.ctx.client(role, team, f"{who}-{self.sfx}")

    def attack(self, name: str, fn: Callable[[], tuple[bool, str]]) -> None:
        try:
            held, detail = fn()
        except Exception as exc:  # an attack that crashes the script is reported, not hidden
            held, detail = False, f"{type(exc).__name__}: {str(exc)[:200]}"
        self.results.append(Result(name, held, detail))

    # ---- 1-3: approvals -----------------------------------------------------------------------------------------
    def lowered_price(self) -> tuple[bool, str]:
        with self.c("ml_platform_admin", "mallory") as mal, self.c("finops_admin", "accomplice") as acc:
            orig = mal.get(f"/v1/pools/{RESERVED}").json()["price_usd_per_gpu_h"]
            try:
                mal.patch(f"/v1/pools/{RESERVED}", json={"price_usd_per_gpu_h": "0.000001"}).raise_for_status()
                res = mal.post("/v1/reservations", json=_res(1000, 36)).json()
            finally:
                mal.patch(f"/v1/pools/{RESERVED}", json={"price_usd_per_gpu_h": str(orig)}).raise_for_status()
            r = _approve(acc, res["reservation_id"]).json()
            mal.post(f"/v1/reservations/{res['reservation_id']}/cancel", json={"reason": "attack replay"})
        held = r.get("status") == "pending_approval" and r.get("approvals_required") == 2
        return held, f"created at {res['est_cost_usd']} $, after one approval: {r.get('status')}"

    def self_approval(self) -> tuple[bool, str]:
        codes = []
        with self.c("finops_admin", "selfie") as me:
            for body in (_res(1, 1), _res(8, 12)):
                rid = me.post("/v1/reservations", json=body).json()["reservation_id"]
                codes.append(_approve(me, rid).status_code)
                me.post(f"/v1/reservations/{rid}/cancel", json={"reason": "attack replay"})
        return codes == [403, 403], f"own approvals answered {codes}"

    def splitting(self) -> tuple[bool, str]:
        statuses = []
        with self.c("finops_admin", "splitter") as req, self.c("ml_platform_admin", "rubber") as bob:
            for _ in range(5):
                rid = req.post("/v1/reservations", json=_res(2, 12)).json()["reservation_id"]
                statuses.append(_approve(bob, rid).json().get("status"))
        submitted = statuses.count("submitted_to_cloud")
        return submitted <= 1, f"5 x 76,420 $ approved by one person: {submitted} reached the provider"

    # ---- 4: budgets -------------------------------------------------------------------------------------------------
    def viewer_spends(self) -> tuple[bool, str]:
        team = f"atk-budget-{self.sfx}"
        with self.c("finops_admin", "fin") as admin, self.c("viewer", "vic") as vic:
            admin.post("/v1/teams", json={"id": team, "name": team}).raise_for_status()
            admin.put(f"/v1/teams/{team}/budget", json={"limit_usd": 500}).raise_for_status()
            body = {"job_class": "serving", "priority": "critical", "sku": "h100_80gb", "gpus": 1, "team": team,
                    "expected_run_s": 3600}  # fmt: skip
            for _ in range(25):
                vic.post("/v1/placement/recommendations", json=body)
            booking = vic.post("/v1/placement/recommendations", json={**body, "admit": True}).status_code
            committed = vic.get(f"/v1/teams/{team}/budget").json()["committed_usd"]
        return committed == 0 and booking == 403, f"committed after 25 viewer requests: {committed}; admit: {booking}"

    # ---- 14-16: input ------------------------------------------------------------------------------------------------
    def idempotency_reuse(self) -> tuple[bool, str]:
        key = f"atk-{self.sfx}"
        with self.c("ml_platform_admin", "idem") as c:
            self._west_pool(c)
            first = c.post("/v1/reservations", json=_res(2, 1), headers={"Idempotency-Key": key}).json()
            other = c.post("/v1/reservations", json=_res(2, 1, ["us-east-1", "us-west-2"]),
                           headers={"Idempotency-Key": key})  # fmt: skip
            c.post(f"/v1/reservations/{first['reservation_id']}/cancel", json={"reason": "attack replay"})
        ok = other.status_code == 409 and key in other.json().get("detail", "")
        return ok, f"same key, other regions: {other.status_code}"

    def sanity_bounds(self) -> tuple[bool, str]:
        with self.c("finops_admin", "huge") as c:
            r = c.post("/v1/reservations", json=_res(2_147_483_647, 36))
        return r.status_code == 422 and r.json().get("field") == "units", f"2,147,483,647 units: {r.status_code}"

    def loose_types(self) -> tuple[bool, str]:
        team_a, team_b = f"atk-a-{self.sfx}", f"atk-b-{self.sfx}"
        place = {"job_class": "training", "priority": "high"}
        bad = []
        with self.c("ml_platform_admin", "types") as c:
            cases = [
                ("/v1/reservations", {**_res(1, 1), "term_months": "12"}, "term_months"),
                ("/v1/placement/recommendations", {**place, "checkpointable": "yes"}, "checkpointable"),
                ("/v1/placement/recommendations", {**place, "degrade_options": [{}]}, "degrade_options[0]"),
            ]
            for path, body, field in cases:
                r = c.post(path, json=body)
                if r.status_code != 422 or r.json().get("field") != field:
                    bad.append(f"{field}: {r.status_code}")
            for team in (team_a, team_b):
                c.post("/v1/teams", json={"id": team, "name": team}).raise_for_status()
            c.post("/v1/tenants", json={"id": f"{team_a}-p", "name": "p", "team_id": team_a}).raise_for_status()
            wid = c.post("/v1/workloads", json={"name": "w", "image": "i:1", "gpu_sku": "h100_80gb",
                                                "team": team_a}).json()["workload_id"]  # fmt: skip
            rec = {"source": f"atk-{self.sfx}", "bucket_start_s": int(time.time()) // 3600 * 3600 - 3600,
                   "bucket_s": 3600, "workload_id": wid, "team_id": team_b, "sku_id": "h100_80gb",
                   "gpus_allocated": 8.0, "gpu_util": 0.5}  # fmt: skip
            r = c.post("/v1/utilization:ingest", json={"records": [rec]})
            if r.status_code != 422 or r.json().get("field") != "records[0].team_id":
                bad.append(f"cross-team ingest: {r.status_code}")
        with self.c("app_team", "ghost", f"no-such-team-{self.sfx}") as ghost:
            code = ghost.get("/v1/workloads").status_code
            if code != 403:
                bad.append(f"token of a missing team: {code}")
        return not bad, "; ".join(bad) or "6 loose inputs refused with the field named"

    # ---- 17-18: the seeds' shapes, plans ----------------------------------------------------------------------------
    def seed_bodies(self) -> tuple[bool, str]:
        bad = []
        with self.c("ml_platform_admin", "seedy") as c, self.c("finops_admin", "seeder") as fin:
            r = c.post("/v1/placement/recommendations", json={"job_class": "training", "priority": "high"})
            bad += [] if r.status_code == 200 else [f"placement {r.status_code}"]
            c.post("/v1/teams", json={"id": "search", "name": "Search"})  # 409 when a previous run made it
            c.post("/v1/tenants", json={"id": "search-prod", "name": "prod", "team_id": "search"})
            wl = {"name": "llm-serve", "image": "registry.example.com/llm-serve:1.4", "cpu": 8, "mem_gb": 64,
                  "gpus": 1, "gpu_sku": "H100", "min_replicas": 2, "max_replicas": 20, "scale_metric": "gpu-util",
                  "budget_usd_day": 2000, "team": "search", "tenant": "search-prod", "priority": "high"}  # fmt: skip
            r = c.post("/v1/workloads", json=wl)
            bad += [] if r.status_code == 201 else [f"workload {r.status_code}"]
            if r.status_code == 201:
                wid = r.json()["workload_id"]
                hour = int(time.time()) // 3600 * 3600
                rows = [{"source": f"atk-{self.sfx}", "bucket_start_s": hour - (h + 1) * 3600, "bucket_s": 3600,
                         "workload_id": wid, "team_id": "search", "sku_id": "h100_80gb", "gpus_allocated": 2.0,
                         "gpu_util": 0.25} for h in range(4)]  # fmt: skip
                c.post("/v1/utilization:ingest", json={"records": rows}).raise_for_status()
                idle = c.get(f"/v1/workloads/{wid}/cost", params={"window": "1d"}).json().get("idle_pct")
                bad += [] if idle is not None and 0 <= idle <= 1 else [f"idle_pct {idle}"]
            self._west_pool(c)
            res = fin.post("/v1/reservations", json=_res(8, 1, ["us-east-1", "us-west-2"])).json()
            split = [(x["region"], x["units"]) for x in res.get("regions", [])]
            bad += [] if split == [("us-east-1", 4), ("us-west-2", 4)] else [f"regions split {split}"]
            a = _approve(c, res["reservation_id"], approver_ids=[f"seedy-{self.sfx}", "someone-else"])
            bad += [] if a.status_code == 200 else [f"approve with approver_ids {a.status_code}"]
        return not bad, "; ".join(bad) or "placement, workload, approve, regions split and idle_pct as the seeds"

    def plans_rebuy(self) -> tuple[bool, str]:
        body = {"sku": "l40s", "region": "us-east-1"}
        since_s = int(time.time()) // 86400 * 86400 - 28 * 86400
        team = f"atk-plan-{self.sfx}"

        def records(workload: str, gpus: float) -> list[dict[str, Any]]:
            return [{"source": f"atk-{self.sfx}", "bucket_start_s": since_s + h * 3600, "bucket_s": 3600,
                     "workload_id": workload, "team_id": team, "sku_id": "l40s", "gpus_allocated": gpus,
                     "gpu_util": 0.6} for h in range(28 * 24)]  # fmt: skip

        with self.c("ml_platform_admin", "planner") as c:
            c.post("/v1/utilization:ingest", json={"records": records(f"atk-wl-a-{self.sfx}", 24.0)}).raise_for_status()
            r1 = c.post("/v1/plans:propose", json=body)
            c.post("/v1/utilization:ingest", json={"records": records(f"atk-wl-b-{self.sfx}", 1.0)})
            r2 = c.post("/v1/plans:propose", json=body)
            first, second = r1.json(), r2.json()
            for r in first.get("created", []) + second.get("created", []):
                c.post(f"/v1/reservations/{r['reservation_id']}/cancel", json={"reason": "attack replay"})
        if r1.status_code != 200 or r2.status_code != 200:
            return False, f"plans:propose answered {r1.status_code}, {r2.status_code}"
        bought = sum(r["units"] for r in first.get("created", []))
        again = sum(r["units"] for r in second.get("created", []))
        return again <= max(8, bought // 4), f"first plan bought {bought} units; after a 1-GPU shift: {again}"

    def _west_pool(self, c: httpx.Client) -> None:
        pool = {"id": WEST, "provider_id": "aws", "region_id": "us-west-2", "sku_id": "h100_80gb",
                "tier": "reserved", "price_usd_per_gpu_h": "4.3619", "term_months": 12}  # fmt: skip
        r = c.post("/v1/pools", json=pool)
        if r.status_code not in (201, 409):
            r.raise_for_status()


def run(ctx: Ctx) -> list[Result]:
    r = _Run(ctx)
    r.attack("1 lowered pool price, approve alone", r.lowered_price)
    r.attack("2 requester approves own reservation", r.self_approval)
    r.attack("3 five reservations under the threshold, one approver", r.splitting)
    r.attack("4 viewer spends a team budget", r.viewer_spends)
    r.attack("14 Idempotency-Key reused with another body", r.idempotency_reuse)
    r.attack("15 2,147,483,647 units", r.sanity_bounds)
    r.attack("16 loose types and a team that does not exist", r.loose_types)
    r.attack("17 the seeds' request bodies as written", r.seed_bodies)
    r.attack("18 plans:propose after a small demand shift", r.plans_rebuy)
    return r.results
