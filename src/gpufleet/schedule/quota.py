"""Team GPU quotas in cohorts (the Kueue model): nominal quota, borrowing limit, lending limit.

Per (team, GPU flavor): ``nominal_gpus`` is the team's quota. ``lending_limit_gpus`` (default: all of the
nominal) is the part of the nominal the cohort may borrow; the rest (``nominal - lendable``) is guaranteed
to the team. ``borrowing_limit_gpus`` (default: unlimited) caps how far above its nominal a team may go.

Accounting for one cohort and flavor:
- ``pool`` = sum of lendable quota of its members;
- a team's usage above its guaranteed part draws on the pool: ``pool_use = max(0, usage - guaranteed)``;
- admission keeps ``sum(pool_use) <= pool`` and ``usage - nominal <= borrowing_limit``.
A team asking for GPUs within its nominal when the pool is exhausted by borrowers gets a *reclaim plan*:
borrowed GPUs to take back from borrowers (largest borrower first), enough to admit it. Left-over pool
capacity is shared among pending demand by weighted water-filling (:meth:`QuotaBook.fair_share`).
Decisions are data: :class:`Admission` carries ``decision`` and ``reason``; nothing here evicts anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gpufleet.domain.errors import ValidationError

Decision = Literal["admit", "admit_after_reclaim", "reject"]


@dataclass(frozen=True, slots=True)
class TeamQuota:
    team: str
    cohort: str
    flavor: str  # GPU type, e.g. "h100_80gb"
    nominal_gpus: int
    borrowing_limit_gpus: int | None = None
    lending_limit_gpus: int | None = None
    weight: float = 1.0

    @property
    def lendable_gpus(self) -> int:
        return self.nominal_gpus if self.lending_limit_gpus is None else min(self.lending_limit_gpus, self.nominal_gpus)

    @property
    def guaranteed_gpus(self) -> int:
        return self.nominal_gpus - self.lendable_gpus


@dataclass(frozen=True, slots=True)
class Reclaim:
    """Take ``gpus`` back from ``team`` (a borrower) so a lender can use its own quota."""

    team: str
    gpus: int


@dataclass(frozen=True, slots=True)
class Admission:
    team: str
    flavor: str
    gpus: int
    decision: Decision
    reason: str  # "within_nominal" | "borrowed" | "reclaim_borrowed" | "over_borrowing_limit" | "cohort_exhausted"
    borrowed_gpus: int = 0
    reclaims: tuple[Reclaim, ...] = ()


@dataclass
class QuotaBook:
    """Quotas and current usage. ``admit`` decides and, if admitted, records the usage."""

    quotas: dict[tuple[str, str], TeamQuota] = field(default_factory=dict)
    usage: dict[tuple[str, str], int] = field(default_factory=dict)
    # derived from ``quotas`` (rebuilt by ``add``): members and lendable pool per (cohort, flavor)
    _members: dict[tuple[str, str], list[TeamQuota]] = field(default_factory=dict, repr=False)
    _pool: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)
    _guaranteed: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)
    # derived from ``usage``: the members' summed pool use per (cohort, flavor), kept up to date by every usage
    # change made here (``admit``, ``release``), so ``check`` does not loop over the cohort
    _pool_used: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)
    _admits: dict[tuple[str, str, int, int], Admission] = field(default_factory=dict, repr=False)

    def add(self, q: TeamQuota) -> None:
        if q.nominal_gpus < 0 or (q.borrowing_limit_gpus or 0) < 0 or (q.lending_limit_gpus or 0) < 0:
            raise ValidationError(f"quota[{q.team}]", "quotas and limits must be >= 0")
        if q.weight <= 0:
            raise ValidationError(f"quota[{q.team}].weight", "must be > 0")
        self.quotas[(q.team, q.flavor)] = q
        self.usage.setdefault((q.team, q.flavor), 0)
        self._members.clear()
        self._pool.clear()
        self._pool_used.clear()
        self._guaranteed[(q.team, q.flavor)] = q.guaranteed_gpus

    def members(self, cohort: str, flavor: str) -> list[TeamQuota]:
        key = (cohort, flavor)
        got = self._members.get(key)
        if got is None:
            got = self._members[key] = [q for q in self.quotas.values() if q.cohort == cohort and q.flavor == flavor]
        return got

    def pool_gpus(self, cohort: str, flavor: str) -> int:
        key = (cohort, flavor)
        got = self._pool.get(key)
        if got is None:
            got = self._pool[key] = sum(q.lendable_gpus for q in self.members(cohort, flavor))
        return got

    def pool_used(self, cohort: str, flavor: str) -> int:
        """The members' summed pool use (their usage above their guaranteed part)."""
        key = (cohort, flavor)
        got = self._pool_used.get(key)
        if got is None:
            got = self._pool_used[key] = sum(self.pool_use(m) for m in self.members(cohort, flavor))
        return got

    def _set_usage(self, key: tuple[str, str], used: int) -> None:
        """The one place usage changes: keeps the cohort's summed pool use in step."""
        g = self._guaranteed[key]
        old = self.usage[key]
        self.usage[key] = used
        ck = (self.quotas[key].cohort, key[1])
        total = self._pool_used.get(ck)
        if total is not None:
            self._pool_used[ck] = total + (used - g if used > g else 0) - (old - g if old > g else 0)

    def pool_use(self, q: TeamQuota, usage: int | None = None) -> int:
        u = self.usage[(q.team, q.flavor)] if usage is None else usage
        return max(0, u - q.guaranteed_gpus)

    def borrowed(self, q: TeamQuota) -> int:
        return max(0, self.usage[(q.team, q.flavor)] - q.nominal_gpus)

    def _quota(self, team: str, flavor: str) -> TeamQuota:
        q = self.quotas.get((team, flavor))
        if q is None:
            raise ValidationError("team", f"no quota for team {team!r} on {flavor!r}")
        return q

    def check(self, team: str, flavor: str, gpus: int, *, record: bool = False) -> Admission:
        """Decide without recording anything; with ``record``, an ``admit`` (it has no reclaims) is recorded as
        :meth:`add_usage` records it (one pass: the simulator's hot path)."""
        if gpus <= 0:
            raise ValidationError("gpus", "must be > 0")
        key = (team, flavor)
        q = self.quotas.get(key)
        if q is None:
            raise ValidationError("team", f"no quota for team {team!r} on {flavor!r}")
        used = self.usage[key]
        after = used + gpus
        nominal = q.nominal_gpus
        borrowed_after = after - nominal if after > nominal else 0
        if q.borrowing_limit_gpus is not None and borrowed_after > q.borrowing_limit_gpus:
            return Admission(team, flavor, gpus, "reject", "over_borrowing_limit")
        g = self._guaranteed[key]
        cohort = (q.cohort, flavor)
        total = self._pool_used.get(cohort)
        if total is None:
            total = self.pool_used(q.cohort, flavor)
        others_use = total - (used - g if used > g else 0)  # the other members' pool use
        pool = self._pool.get(cohort)
        if pool is None:
            pool = self.pool_gpus(q.cohort, flavor)
        after_use = after - g if after > g else 0
        if others_use + after_use <= pool:
            newly = borrowed_after - (used - nominal if used > nominal else 0)
            akey = (team, flavor, gpus, newly)
            got = self._admits.get(akey)  # decisions are immutable: the hot path shares equal instances
            if got is None:
                reason = "within_nominal" if borrowed_after == 0 else "borrowed"
                got = self._admits[akey] = Admission(team, flavor, gpus, "admit", reason, newly)
            if record:  # _set_usage(key, after), with the cohort's pool use read above (pool_used stored it)
                self.usage[key] = after
                self._pool_used[cohort] = others_use + after_use
            return got
        if borrowed_after > 0:
            return Admission(team, flavor, gpus, "reject", "cohort_exhausted")
        # within its own nominal: take lent quota back from borrowers, largest borrower first
        short = others_use + after_use - pool
        plan: list[Reclaim] = []
        for m in sorted(self.members(q.cohort, flavor), key=lambda m: (-self.borrowed(m), m.team)):
            if short <= 0:
                break
            take = min(self.borrowed(m), short)
            if m.team != team and take > 0:
                plan.append(Reclaim(m.team, take))
                short -= take
        if short > 0:  # cannot happen while every team stays within its nominal + pool rules
            return Admission(team, flavor, gpus, "reject", "cohort_exhausted")
        return Admission(team, flavor, gpus, "admit_after_reclaim", "reclaim_borrowed", 0, tuple(plan))

    def admit(self, team: str, flavor: str, gpus: int, decided: Admission | None = None) -> Admission:
        """Decide and record: applies the reclaim plan (borrowers' usage drops) and the new usage.

        ``decided``: the result of :meth:`check` for this very request with no usage change since (saves
        deciding twice); it must match ``team``, ``flavor`` and ``gpus``."""
        a = self.check(team, flavor, gpus) if decided is None else decided
        if (a.team, a.flavor, a.gpus) != (team, flavor, gpus):
            raise ValidationError("decided", f"admission for {a.team}/{a.flavor}/{a.gpus}, not {team}/{flavor}/{gpus}")
        if a.decision != "reject":
            for r in a.reclaims:
                self._set_usage((r.team, flavor), self.usage[(r.team, flavor)] - r.gpus)
            self._set_usage((team, flavor), self.usage[(team, flavor)] + gpus)
        return a

    def add_usage(self, key: tuple[str, str], gpus: int) -> None:
        """Record an admission of ``gpus`` without reclaims (as :meth:`admit` of a decided ``admit`` does)."""
        self._set_usage(key, self.usage[key] + gpus)

    def release(self, team: str, flavor: str, gpus: int) -> None:
        key = (team, flavor)
        if gpus < 0 or self.usage.get(key, 0) < gpus:
            raise ValidationError("gpus", f"{team} releases {gpus} GPUs but uses {self.usage.get(key, 0)}")
        self._set_usage(key, self.usage[key] - gpus)

    def fair_share(self, cohort: str, flavor: str, pending: dict[str, int]) -> dict[str, int]:
        """Split the pool capacity nobody uses among ``pending`` demand (GPUs per team) by weight.

        Water-filling: each round gives every unsatisfied team ``free * weight / total_weight`` (at least
        one GPU to the heaviest while any is free), capped by its demand and borrowing headroom."""
        members = {m.team: m for m in self.members(cohort, flavor)}
        free = self.pool_gpus(cohort, flavor) - sum(self.pool_use(m) for m in members.values())
        want: dict[str, int] = {}
        for team, g in pending.items():
            m = members.get(team)
            if m is None or g <= 0:
                continue
            head = g
            if m.borrowing_limit_gpus is not None:
                used = self.usage[(team, flavor)]
                head = min(head, max(0, m.nominal_gpus + m.borrowing_limit_gpus - used))
            want[team] = head
        got = dict.fromkeys(want, 0)
        while free > 0:
            active = [t for t in want if got[t] < want[t]]
            if not active:
                break
            total_w = sum(members[t].weight for t in active)
            gave = 0
            for t in sorted(active, key=lambda t: (-members[t].weight, t)):
                share = (
                    max(1, int(free * members[t].weight / total_w))
                    if gave == 0
                    else int(free * members[t].weight / total_w)
                )
                share = min(share, want[t] - got[t], free - gave)
                got[t] += share
                gave += share
            if gave == 0:
                break
            free -= gave
        return got
