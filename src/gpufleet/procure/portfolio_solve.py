"""Decomposed LP solves for the portfolio optimizer (:mod:`gpufleet.procure.portfolio`).

Without a fleet-wide coupling row the portfolio LP is block diagonal: one block per SKU-region pair
(its commitment recurrences, coverage rows, service level and any pair-scoped provider cap). Solving the
blocks one by one gives the same optimum as the joint LP, and much faster (simplex work grows faster than
linearly with size).

A fleet-wide provider share cap couples the blocks through one row per provider. When the share is at
least one half, at most one provider can exceed it, so the cap is one linear row ``d . x <= 0`` with
``d = a_P - share * sum_Q a_Q``. It is handled by Lagrangian relaxation on that single row: the dual
``g(lam) = min_x c.x + lam d.x`` (blocks solved independently, each warm-started from its previous basis)
is concave and piecewise linear; its maximum is found by intersecting supporting lines (a cutting-plane
Newton step on a one-dimensional dual, finite for an LP). At the optimal ``lam`` the two bracketing block
solutions are both Lagrangian-optimal, and the convex combination of them that makes ``d.x = 0`` is an
optimal solution of the capped LP (complementary slackness). The remaining duality gap is reported.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

import highspy
import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

FloatArray = npt.NDArray[np.float64]
Block = tuple[int, int, int, int]  # var start, var end, row start, row end


class NotDecomposable(Exception):
    """The block solve cannot answer (caller falls back to the joint LP)."""


@dataclass(frozen=True, slots=True)
class BlockSolution:
    x: FloatArray
    objective: float
    status: str
    lagrange_iterations: int = 0
    duality_gap_usd: float = 0.0


class BlockLP:
    """One HiGHS model per block; costs can be changed and the blocks re-solved from their last basis."""

    def __init__(
        self,
        a: sp.csr_array,
        lb: FloatArray,
        ub: FloatArray,
        rlo: FloatArray,
        rhi: FloatArray,
        blocks: list[Block],
        time_limit_s: float,
    ) -> None:
        self.blocks = blocks
        self.n = a.shape[1]
        self.models: list[highspy.Highs] = []
        for v0, v1, r0, r1 in blocks:
            sub = sp.csc_array(a[r0:r1, v0:v1])
            lp = highspy.HighsLp()
            lp.num_col_ = v1 - v0
            lp.num_row_ = r1 - r0
            lp.col_cost_ = np.zeros(v1 - v0)
            lp.col_lower_ = lb[v0:v1]
            lp.col_upper_ = ub[v0:v1]
            lp.row_lower_ = rlo[r0:r1]
            lp.row_upper_ = rhi[r0:r1]
            lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
            lp.a_matrix_.start_ = sub.indptr
            lp.a_matrix_.index_ = sub.indices
            lp.a_matrix_.value_ = sub.data
            h = _quiet_highs()
            h.setOptionValue("time_limit", float(time_limit_s))
            h.passModel(lp)
            self.models.append(h)

    def solve(self, c: FloatArray) -> FloatArray:
        x = np.zeros(self.n)
        for h, (v0, v1, _, _) in zip(self.models, self.blocks, strict=True):
            k = v1 - v0
            h.changeColsCost(k, np.arange(k, dtype=np.int32), np.ascontiguousarray(c[v0:v1], dtype=np.float64))
            h.run()
            status = h.getModelStatus()
            if status != highspy.HighsModelStatus.kOptimal:
                raise NotDecomposable(h.modelStatusToString(status))
            x[v0:v1] = np.asarray(h.getSolution().col_value)
        return x


def _quiet_highs() -> highspy.Highs:
    """A silent HiGHS instance (its C++ constructor writes a banner to stdout once per process, which
    would corrupt JSON written to stdout; file descriptor 1 is pointed at /dev/null meanwhile)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()  # type: ignore[no-untyped-call]
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    h.setOptionValue("output_flag", False)
    return h


def check_blocks(blocks: list[Block], n: int, m: int) -> None:
    """Blocks must tile the variables and the rows (no coupling row left out)."""
    v, r = 0, 0
    for v0, v1, r0, r1 in blocks:
        if v0 != v or r0 != r:
            raise NotDecomposable("blocks do not tile the model")
        v, r = v1, r1
    if v != n or r != m:
        raise NotDecomposable("rows or variables outside the blocks")


def solve_blocks(lp: BlockLP, c: FloatArray) -> BlockSolution:
    x = lp.solve(c)
    return BlockSolution(x, float(c @ x), "Optimal (block decomposition)")


def solve_share_capped(
    lp: BlockLP, c: FloatArray, coef: dict[str, FloatArray], share: float, *, rel_tol: float = 1e-9
) -> BlockSolution:
    """Minimize ``c.x`` over the blocks subject to every provider's share of ``sum_Q coef_Q.x`` <= ``share``."""
    x0 = lp.solve(c)
    totals = {pid: float(a @ x0) for pid, a in coef.items()}
    grand = sum(totals.values())
    top = max(totals, key=lambda k: totals[k]) if totals else None
    if top is None or totals[top] <= share * grand + rel_tol * max(abs(grand), 1.0):
        return BlockSolution(x0, float(c @ x0), "Optimal (block decomposition, cap not binding)")
    if share < 0.5:
        raise NotDecomposable("a share cap below one half can bind for several providers")
    d = coef[top] - share * np.sum(np.vstack(list(coef.values())), axis=0)
    scale = max(float(np.abs(c).sum()), 1.0)
    tol = rel_tol * scale
    lo = (0.0, x0, float(c @ x0), float(d @ x0))  # (lam, x, f, h) with h > 0
    # start small (a small cost change re-solves in few pivots from the previous basis) and grow
    priced = np.abs(c[(d != 0) & (c != 0)])
    lam = 0.05 * (float(np.median(priced)) if priced.size else 1.0) / max(float(np.abs(d).max()), 1e-12)
    hi = None
    for _ in range(60):
        x = lp.solve(c + lam * d)
        h = float(d @ x)
        if h <= tol:
            hi = (lam, x, float(c @ x), h)
            break
        lo = (lam, x, float(c @ x), h)
        lam *= 4.0
    if hi is None:
        raise NotDecomposable("provider cap looks infeasible")
    it, dual = 0, -math.inf
    for it in range(1, 200):
        if abs(hi[3]) <= tol:
            return BlockSolution(hi[1], hi[2], "Optimal (block decomposition + Lagrangian cap)", it, 0.0)
        # supporting lines f + lam h of the two bracket solutions meet at lam_c; g(lam_c) is a lower bound
        lam_c = (hi[2] - lo[2]) / (lo[3] - hi[3])
        upper = lo[2] + lam_c * lo[3]
        x = lp.solve(c + lam_c * d)
        f, h = float(c @ x), float(d @ x)
        dual = max(dual, f + lam_c * h)
        if upper - (f + lam_c * h) <= tol:
            break
        if h > tol:
            lo = (lam_c, x, f, h)
        else:
            hi = (lam_c, x, f, h)
    theta = -hi[3] / (lo[3] - hi[3])  # theta * h_lo + (1 - theta) * h_hi = 0
    x_mix = theta * lo[1] + (1.0 - theta) * hi[1]
    f_mix = float(c @ x_mix)
    return BlockSolution(x_mix, f_mix, "Optimal (block decomposition + Lagrangian cap)", it, max(f_mix - dual, 0.0))
