"""Scenarios: what the simulated world looks like. YAML files validated with errors that name the field and line.

A scenario lists, per SKU and region, the capacity pools (initial reservations, on-demand quota and stockouts,
spot preemption, secondary capacity and lead time), the serving fleets (traffic shape and growth) and the
training demand (experiments with heavy-tailed sizes and durations, planned large runs).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError

from gpufleet.control.scheduling import CLASS_POLICIES
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.skus import SKUS_BY_ID

MAX_DAYS = 3650  # ten years of simulated time; more is a typo
# Upper bounds far above any real fleet: a larger number is a typo, and it overflowed in the run (``int(inf)``, int64
# arrays) with a traceback instead of an error naming the field.
MAX_HOURS = MAX_DAYS * 24  # a time span given in hours (lead times, stock spells, durations, repairs)
MAX_SECONDS = MAX_DAYS * 86400  # a time span given in seconds (checkpoint intervals)
# replicas a serving fleet needs at its base rate: gpufleet's replica policy does work in proportion to it (a fleet
# needing 1e15 replicas hung the run in BurstFloor.level)
MAX_BASE_REPLICAS = 1e5
Pos = Annotated[float, Field(gt=0)]
NonNeg = Annotated[float, Field(ge=0)]
PosInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]
Share = Annotated[float, Field(ge=0, le=1)]
Hours = Annotated[float, Field(ge=0, le=MAX_HOURS)]
PosHours = Annotated[float, Field(gt=0, le=MAX_HOURS)]
Interval = Annotated[int, Field(gt=0, le=MAX_SECONDS)]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class InitialReservation(_M):
    gpus: PosInt
    remaining_months: Annotated[float, Field(gt=0, le=36)]


class PoolSpec(_M):
    """Capacity for one SKU in one region, across the four tiers."""

    sku: str
    region: str = "us-east-1"
    reservations: list[InitialReservation] = []
    reserved_lead_time_h: Hours = 14 * 24
    reserved_term_months: Annotated[int, Field(gt=0, le=120)] = 12
    on_demand_quota_gpus: NonNegInt | None = None
    on_demand_mean_in_stock_h: PosHours = 240.0
    on_demand_mean_stockout_h: Hours = 12.0  # 0: a stock-out lasts no time, the pool is never out of stock
    spot_capacity_gpus: NonNegInt = 0
    spot_preemption_rate_per_h: NonNeg = 0.05
    secondary_capacity_gpus: NonNegInt = 0
    secondary_lead_time_h: Hours = 6.0
    node_start_s: NonNegInt = 600

    @model_validator(mode="after")
    def _known_sku(self) -> PoolSpec:
        if self.sku not in SKUS_BY_ID:
            raise ValueError(f"unknown sku {self.sku!r}; known: {sorted(SKUS_BY_ID)}")
        per_node = SKUS_BY_ID[self.sku].gpus_per_node
        for i, r in enumerate(self.reservations):  # a reservation is whole instances (the desk activates nodes)
            if r.gpus % per_node:
                raise ValueError(
                    f"reservations[{i}].gpus: {r.gpus} GPUs is not whole {self.sku} nodes ({per_node} GPUs each)"
                )
        return self


class ServingSpec(_M):
    name: str
    team: str
    tenant: str
    sku: str
    gpus_per_replica: Annotated[int, Field(ge=1, le=8)]
    target_rps_per_replica: Pos
    base_rps: Annotated[float, Field(gt=0, le=1e9)]
    growth_per_quarter: Annotated[float, Field(gt=0, le=100)] = 1.0
    daily_amplitude: Share = 0.4
    weekly_amplitude: Share = 0.15
    noise_sd: Share = 0.05  # per control period, lognormal
    day_to_day_sd: Share = 0.2  # per day, lognormal: ServeGen's daily means vary by CV ~0.22
    min_replicas: NonNegInt = 1
    max_replicas: PosInt = 64
    cold_start_s: NonNegInt = 210
    scale_down_delay_s: NonNegInt = 600
    # the request queue (sim/queueing.py): ``batched`` (continuous batching) or ``exclusive`` (one request per
    # replica; a request holds it 1 / target_rps_per_replica s); attainment = requests waiting at most slo_s
    queue: Literal["batched", "exclusive"] = "batched"
    slo_s: Pos = 2.0

    @model_validator(mode="after")
    def _check(self) -> ServingSpec:
        if self.sku not in SKUS_BY_ID:
            raise ValueError(f"unknown sku {self.sku!r}; known: {sorted(SKUS_BY_ID)}")
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) > max_replicas ({self.max_replicas})")
        if self.base_rps / self.target_rps_per_replica > MAX_BASE_REPLICAS:
            raise ValueError(
                f"base_rps / target_rps_per_replica is {self.base_rps / self.target_rps_per_replica:.3g} replicas at "
                f"the base rate; at most {MAX_BASE_REPLICAS:.0e}"
            )
        return self


class ExperimentSpec(_M):
    """Many small jobs: Poisson arrivals with a working-hours cycle, heavy-tailed sizes and durations."""

    sku: str
    jobs_per_day: Annotated[float, Field(gt=0, le=1e6)]
    teams: Annotated[dict[str, Pos], Field(min_length=1)]
    size_gpus: Annotated[dict[int, Pos], Field(min_length=1)]  # GPUs per job -> relative frequency
    duration_median_h: PosHours = 0.5
    duration_sigma: Annotated[float, Field(gt=0, le=10)] = 1.8
    duration_max_h: PosHours = 24 * 7
    checkpointable_share: Share = 0.6
    checkpoint_interval_s: Interval = 3600
    daily_amplitude: Share = 0.5

    @model_validator(mode="after")
    def _check(self) -> ExperimentSpec:
        if self.sku not in SKUS_BY_ID:
            raise ValueError(f"unknown sku {self.sku!r}; known: {sorted(SKUS_BY_ID)}")
        for g in self.size_gpus:
            _check_job_size(g, self.sku)
        return self


def _check_job_size(gpus: int, sku: str) -> None:
    """A job runs on one node or on whole nodes: at most a node's GPUs, or a multiple of them."""
    per_node = SKUS_BY_ID[sku].gpus_per_node
    if gpus <= 0 or (gpus > per_node and gpus % per_node):
        raise ValueError(f"size {gpus} GPUs: must be <= {per_node} or a multiple of {per_node}")


class PlannedRun(_M):
    """A large training run registered ahead of time."""

    name: str
    team: str
    sku: str
    gpus: PosInt
    start_day: Annotated[float, Field(ge=0, le=MAX_DAYS)]
    duration_days: Annotated[float, Field(gt=0, le=MAX_DAYS)]
    checkpoint_interval_s: Interval = 1800
    probability: Share = 1.0  # a big run either happens or not

    @field_validator("gpus")
    @classmethod
    def _whole_nodes(cls, v: int, info: ValidationInfo) -> int:
        sku = info.data.get("sku")
        if sku in SKUS_BY_ID:  # an unknown sku is refused by Scenario (no pool offers it)
            _check_job_size(v, sku)
        return v


class FailureSpec(_M):
    node_mtbf_days: Annotated[float, Field(gt=0, le=1e9)] = 250.0  # 1e9 days: never, in effect
    repair_h: PosHours = 4.0


class ControlSpec(_M):
    control_period_s: PosInt = 900  # divides an hour (the hourly series are sampled on the tick at the hour)
    procurement_period_days: PosInt = 7
    approval_threshold_usd: NonNeg = 500_000.0
    idle_node_timeout_s: NonNegInt = 600
    # relative error of the end time a running training job reports (sim/freeing.py); the node scaler sees it
    eta_error_sd: NonNeg = 0.2
    target_utilization: Annotated[float, Field(gt=0, le=1)] = 0.7
    # the scheduler policy of gpufleet's loop (the baseline loop always uses bestfit); see docs/schedule.md
    scheduler_policy: str = "gpufleet"
    preemption: bool = True  # checkpoint-aware priority preemption in gpufleet's loop
    preempt_grace_s: NonNegInt = 120

    @field_validator("control_period_s")
    @classmethod
    def _divides_an_hour(cls, v: int) -> int:
        if 3600 % v:
            raise ValueError(f"{v} s does not divide an hour (3600 s): the hourly series are sampled on a tick")
        return v

    @field_validator("scheduler_policy")
    @classmethod
    def _known_policy(cls, v: str) -> str:
        if v not in CLASS_POLICIES:
            raise ValueError(f"unknown scheduler policy {v!r}; choose one of {list(CLASS_POLICIES)}")
        return v


class QuotaSpec(_M):
    """A team's GPU quota on one SKU, in a cohort (Kueue's model, see gpufleet.schedule.quota)."""

    team: str
    sku: str
    cohort: str = "default"
    nominal_gpus: NonNegInt
    borrowing_limit_gpus: NonNegInt | None = None  # None: may borrow all the cohort lends
    lending_limit_gpus: NonNegInt | None = None  # None: lends all of its nominal


class Scenario(_M):
    name: str
    seed: NonNegInt = 0
    days: Annotated[int, Field(gt=0, le=MAX_DAYS)] = 60
    pools: Annotated[list[PoolSpec], Field(min_length=1)]
    serving: list[ServingSpec] = []
    experiments: list[ExperimentSpec] = []
    planned_runs: list[PlannedRun] = []
    failures: FailureSpec = FailureSpec()
    control: ControlSpec = ControlSpec()
    quotas: list[QuotaSpec] = []
    # day 0's fleet is already up: nodes launched and serving replicas started at time 0 are ready at time 0 (a
    # team's running product and the nodes under it exist before the horizon opens); false: every loop starts its
    # serving fleets from nothing, behind a node start and a cold start (docs/scenario.md, "Day 0")
    warm_start: bool = True

    @model_validator(mode="after")
    def _quotas_admit_every_job(self) -> Scenario:
        """A job larger than its team could ever hold would wait forever: refuse such a scenario."""
        seen: set[tuple[str, str]] = set()
        for i, q in enumerate(self.quotas):
            if (q.team, q.sku) in seen:
                raise ValueError(f"quotas[{i}]: a second quota for team {q.team!r} on {q.sku!r}")
            seen.add((q.team, q.sku))
        for i, q in enumerate(self.quotas):
            lent = sum(
                (o.nominal_gpus if o.lending_limit_gpus is None else min(o.lending_limit_gpus, o.nominal_gpus))
                for o in self.quotas
                if o.cohort == q.cohort and o.sku == q.sku and o.team != q.team
            )
            cap = q.nominal_gpus + (lent if q.borrowing_limit_gpus is None else min(lent, q.borrowing_limit_gpus))
            sizes = [r.gpus for r in self.planned_runs if r.team == q.team and r.sku == q.sku]
            sizes += [g for e in self.experiments if e.sku == q.sku and q.team in e.teams for g in e.size_gpus]
            sizes += [s.gpus_per_replica for s in self.serving if s.team == q.team and s.sku == q.sku]
            if sizes and max(sizes) > cap:
                raise ValueError(
                    f"quotas[{i}] ({q.team} on {q.sku}): a {max(sizes)}-GPU job could never be admitted "
                    f"(nominal {q.nominal_gpus} + borrowable {cap - q.nominal_gpus})"
                )
        return self

    @model_validator(mode="after")
    def _pools_cover_demand(self) -> Scenario:
        seen: set[tuple[str, str]] = set()
        for i, p in enumerate(self.pools):
            if (p.sku, p.region) in seen:  # the run would depend on the order of the two
                raise ValueError(f"pools[{i}]: a second pool for {p.sku!r} in {p.region!r}")
            seen.add((p.sku, p.region))
        have = {(p.sku) for p in self.pools}
        for i, s in enumerate(self.serving):
            if s.sku not in have:
                raise ValueError(f"serving[{i}] ({s.name}) needs sku {s.sku!r} but no pool offers it")
        for i, e in enumerate(self.experiments):
            if e.sku not in have:
                raise ValueError(f"experiments[{i}] needs sku {e.sku!r} but no pool offers it")
        for i, r in enumerate(self.planned_runs):
            if r.sku not in have:
                raise ValueError(f"planned_runs[{i}] ({r.name}) needs sku {r.sku!r} but no pool offers it")
        return self


def _line_of(root: yaml.Node | None, loc: tuple[int | str, ...]) -> int | None:
    """1-based line of the YAML node at ``loc`` (the deepest node found on the path)."""
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = next((v for k, v in node.value if getattr(k, "value", None) == str(key)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            nxt = node.value[key]
        else:
            nxt = None
        if nxt is None:
            break
        node = nxt
        line = node.start_mark.line + 1
    return line


def _field_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "<root>"


def parse_scenario(data: Any, *, source: str = "<scenario>", yaml_root: yaml.Node | None = None) -> Scenario:
    """Validate raw data into a Scenario; errors name the field (and the file and line when known)."""
    try:
        return Scenario.model_validate(data)
    except PydanticValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        line = _line_of(yaml_root, loc)
        where = f"{source}:{line}" if line else source
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise ValidationError(_field_path(loc), f"{err['msg']}{more}", where) from None


class _ScenarioLoader(yaml.SafeLoader):
    """Safe YAML that also refuses a key given twice in a mapping (plain YAML keeps the last silently) and anchors
    and aliases (a few KB of nested aliases expand to millions of nodes; a scenario has no use for them)."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None, None, "anchors and aliases (&name, *name) are not allowed in a scenario", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                line = first.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: the base class refuses it
                continue
            if line != key_node.start_mark.line + 1:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice (first on line {line})", key_node.start_mark
                )
        return super().construct_mapping(node, deep)


def parse_scenario_yaml(text: str, *, source: str = "<scenario>") -> Scenario:
    """A scenario from YAML text (the caller reads the file: :func:`gpufleet.cli.scenario_files.load_scenario`);
    errors name the field, ``source`` and the line. Keys given twice, anchors and aliases are refused."""
    loader = _ScenarioLoader(text)
    try:
        root = loader.get_single_node()
        data = loader.construct_document(root) if root is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        raise ValidationError("yaml", f"not valid YAML: {getattr(exc, 'problem', exc)}", where) from None
    except RecursionError:
        raise ValidationError("yaml", "nested too deeply", source) from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise ValidationError("<root>", "a scenario must be a mapping", f"{source}:1")
    return parse_scenario(data, source=source, yaml_root=root)


def dump_scenario(s: Scenario) -> str:
    return yaml.safe_dump(s.model_dump(mode="json"), sort_keys=False)
