"""TopDown as the 2020 Census ran it, in pure ε-DP: per geographic node, noisy measurements of the
detailed histogram (every person type) and of the declared tables; then, from the root down, one
non-negative integer histogram per node, each parent's children closest in weighted least squares
to all their measurements and adding up cell by cell to the parent; the leaves' histograms are the
microdata detail file (MDF), and every published table is a tabulation of it.

The privacy unit is one person. The tree's shape (its nodes) comes from public inputs only; what
depends on the persons is the exact histograms, which reach the output only through the noisy
measurements (:func:`measure`). Everything after them (:func:`estimate`, :func:`mdf_rows`) is
post-processing and never sees the exact histograms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

from censusrecon.synth.keyed import noisy, releases_of
from censusrecon.synth.mechanism import Mechanism, PrivacyError, Relation, parse_relation

#: The 2020 production weights of the person-file budget per geographic level (out of 4099),
#: renormalised over the levels a release's tree has.
PRODUCTION_WEIGHTS = {"national": 104, "state": 1440, "county": 447, "tract": 687, "block_group": 1256, "block": 165}
#: Each level's budget share for the detailed histogram; the rest goes to the declared tables. Our
#: default (2020 production split each level's budget over a dozen query groups): the tables are
#: what is published and attacked, and the detailed histogram pins the types the tables cannot.
DETAILED_SHARE = Fraction(1, 4)
#: The queries measured at every node, in this order.
QUERIES = ("detailed", "tables")


def _fraction(x) -> Fraction:
    """A share as an exact fraction: ints and Fractions as they are, floats by their decimal text
    (so 0.1 is 1/10, what the user wrote, not the binary double near it)."""
    if isinstance(x, (int, Fraction)):
        return Fraction(x)
    return Fraction(repr(float(x)))


def level_shares(levels: list[str], shares: dict | None = None) -> dict[str, Fraction]:
    """Each level's share of the budget as an exact fraction, the shares adding up to exactly 1: the
    given ``shares`` or the 2020 production weights, renormalised over ``levels``."""
    base = PRODUCTION_WEIGHTS if shares is None else shares
    missing = [lv for lv in levels if lv not in base]
    if missing:
        raise PrivacyError(f"no budget share for levels {missing}; give release.topdown.shares for every level")
    w = {lv: _fraction(base[lv]) for lv in levels}
    if any(v <= 0 for v in w.values()):
        raise PrivacyError("every level's budget share must be positive")
    total = sum(w.values())
    return {lv: v / total for lv, v in w.items()}


@dataclass(frozen=True)
class Strategy:
    """What is measured at every node: the detailed histogram over the person types, and the
    declared tables as a (cells × types) 0/1 int64 matrix ``tables`` (a tables workload over the
    person domain: :func:`reconstruct.exact.query_matrix`)."""

    tables: sp.csr_matrix
    detailed_share: Fraction = DETAILED_SHARE

    @property
    def types(self) -> int:
        return self.tables.shape[1]

    def cells_per_person(self) -> int:
        """The most table cells one person lies in: the tables' L1 sensitivity under add/remove."""
        return int(np.asarray(self.tables.sum(axis=0)).max()) if self.tables.shape[0] else 0

    def tabulate(self, hist: np.ndarray) -> np.ndarray:
        """The tables' exact counts of histograms (… × types, int64) → (… × cells, int64)."""
        h = np.asarray(hist, dtype=np.int64)
        flat = h.reshape(-1, h.shape[-1])
        out = (self.tables @ flat.T).T
        return np.asarray(out, dtype=np.int64).reshape(*h.shape[:-1], self.tables.shape[0])


@dataclass
class TreeShape:
    """The public shape of a release's tree: per level (coarsest first) its nodes' ids and each
    node's parent (index into the level above; -1 for the root)."""

    levels: list[str]
    ids: list[np.ndarray]
    parent: list[np.ndarray]

    def check(self) -> None:
        if len(self.ids[0]) != 1:
            raise PrivacyError("a TopDown tree has one root")
        for lv in range(1, len(self.levels)):
            p = self.parent[lv]
            if len(p) and (p.min() < 0 or p.max() >= len(self.ids[lv - 1])):
                raise PrivacyError(f"level {self.levels[lv]}: a node's parent is not a node of the level above")

    def key(self) -> tuple:
        """Everything the shape publishes, comparable between two releases."""
        return (tuple(self.levels), tuple(tuple(map(str, i)) for i in self.ids),
                tuple(tuple(map(int, p)) for p in self.parent))


@dataclass
class Tree:
    """A tree's shape and, per level, its nodes' exact detailed histograms (nodes × types, int64):
    the private input, read by :func:`measure` and nothing else."""

    shape: TreeShape
    hist: list[np.ndarray]

    @property
    def levels(self) -> list[str]:
        return self.shape.levels


def children_sum(shape: TreeShape, level: int, hist: np.ndarray) -> np.ndarray:
    """Per node of level ``level − 1``, the sum of its children's rows of ``hist`` (level ``level``)."""
    out = np.zeros((len(shape.ids[level - 1]), hist.shape[1]), dtype=hist.dtype)
    np.add.at(out, shape.parent[level], hist)
    return out


def build_tree(shape: TreeShape, leaf_hist: np.ndarray) -> Tree:
    """A tree whose leaves hold ``leaf_hist`` (leaves × types) and whose every other node holds the
    sum of its children."""
    shape.check()
    hist = [None] * len(shape.levels)
    hist[-1] = np.asarray(leaf_hist, dtype=np.int64)
    for lv in range(len(shape.levels) - 1, 0, -1):
        hist[lv - 1] = children_sum(shape, lv, hist[lv])
    return Tree(shape, hist)


@dataclass(frozen=True)
class Budget:
    """One (level, query) measurement's budget. Pure ε (``noise == "laplace"``): ε as an exact
    fraction, the L1 sensitivity, the discrete Laplace scale (a double at least Δ/ε, so Δ/scale ≤ ε
    exactly). zCDP (``noise == "gaussian"``): ρ as an exact fraction, the squared L2 sensitivity, the
    discrete Gaussian σ (a double with Δ₂²/(2σ²) ≤ ρ exactly)."""

    level: str
    query: str
    epsilon: Fraction  # ε for pure DP, ρ for zCDP
    sensitivity: int  # L1 for pure DP, squared L2 for zCDP
    scale: float  # discrete Laplace scale, or discrete Gaussian σ
    noise: str = "laplace"

    def spent(self) -> Fraction:
        """What this measurement really spends: Δ/scale (ε), or Δ₂²/(2σ²) (ρ), exactly."""
        if not self.sensitivity:
            return Fraction(0)
        if self.noise == "gaussian":
            return Fraction(self.sensitivity) / (2 * Fraction(self.scale) ** 2)
        return Fraction(self.sensitivity) / Fraction(self.scale)

    def variance(self) -> float:
        """The noise's variance (the discrete Gaussian's is at most σ², used as such)."""
        return self.scale**2 if self.noise == "gaussian" else laplace_variance(self.scale)


def _scale_at_least(sensitivity: int, epsilon: Fraction) -> float:
    """The smallest double ≥ Δ/ε (exact rational comparison)."""
    exact = Fraction(sensitivity) / epsilon
    s = float(exact)
    while Fraction(s) < exact:
        s = float(np.nextafter(s, np.inf))
    return s


def _sigma_at_least(l2_squared: int, rho: Fraction) -> float:
    """The smallest double σ with σ² ≥ Δ₂²/(2ρ) (exact rational comparison)."""
    exact = Fraction(l2_squared) / (2 * rho)
    s = math.sqrt(float(exact))
    while Fraction(s) ** 2 < exact:
        s = float(np.nextafter(s, np.inf))
    return s


def rho_for(epsilon: float, delta: float) -> Fraction:
    """The largest ρ whose zCDP guarantee converts to (ε, δ)-DP by ε = ρ + 2√(ρ ln(1/δ)) (Bun and
    Steinke 2016, Proposition 1.3), as an exact fraction a hair below the float (never above)."""
    if not 0 < delta < 1:
        raise PrivacyError(f"δ must lie in (0, 1), got {delta}")
    log = math.log(1 / delta)
    rho = (math.sqrt(log + epsilon) - math.sqrt(log)) ** 2
    return Fraction(rho) * Fraction(999_999, 1_000_000)


def epsilon_of(rho: float, delta: float) -> float:
    """(ε, δ)-DP of ρ-zCDP: ε = ρ + 2√(ρ ln(1/δ))."""
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


@dataclass(frozen=True)
class TopDownPrivacy:
    """How a TopDown release spends its budget and what it keeps exact: the neighbouring relation, each level's
    share of the budget (None: the 2020 production shares, :func:`level_shares`), ``accounting`` pure ε-DP (discrete
    Laplace) or zCDP (discrete Gaussian, ρ the largest that converts to (ε, ``delta``)), and the declared invariants
    (``root_total``: the root's person count published exactly, under replace-one only)."""

    relation: Relation | str
    shares: dict | None = None
    accounting: str = "pure"
    delta: float = 1e-10
    invariants: tuple[str, ...] = ()


def budgets(levels: list[str], epsilon: float, strategy: Strategy, privacy: TopDownPrivacy,
            backend=None) -> list[Budget]:
    """Every (level, query) measurement's budget. Level l gets ε·share_l (or ρ·share_l under zCDP,
    ρ the largest that converts to (ε, δ)), split between the detailed histogram
    (``strategy.detailed_share``) and the tables. A person lies in one node per level: one cell of
    its detailed histogram and ``cells_per_person`` table cells, so the L1 sensitivity is 1 and
    cells_per_person under add/remove (squared L2: the same), doubled under replace-one (the person
    may become another type in another node). The budgets add up to at most ε (ρ) in exact
    arithmetic; with a backend that has a privacy map (OpenDP's), each Laplace scale is raised until
    the map says no more than its ε."""
    relation, shares = parse_relation(privacy.relation), privacy.shares
    accounting, delta = privacy.accounting, privacy.delta
    if accounting not in ("pure", "zcdp"):
        raise PrivacyError(f"unknown accounting {accounting!r}; use 'pure' or 'zcdp'")
    gaussian = accounting == "zcdp"
    total = rho_for(epsilon, delta) if gaussian else _fraction(epsilon)
    sh = level_shares(levels, shares)
    mult = 2 if relation is Relation.REPLACE_ONE else 1
    out = []
    for lv in levels:
        for query, part, delta_q in (("detailed", strategy.detailed_share, 1),
                                     ("tables", 1 - strategy.detailed_share, strategy.cells_per_person())):
            eps = total * sh[lv] * part
            delta_q *= mult
            if gaussian:
                out.append(Budget(lv, query, eps, delta_q, _sigma_at_least(delta_q, eps), "gaussian"))
                continue
            scale = _scale_at_least(delta_q, eps)
            if backend is not None and hasattr(backend, "privacy_map"):
                for _ in range(1000):
                    if Fraction(backend.privacy_map(scale, delta_q)) <= eps:
                        break
                    scale = float(np.nextafter(scale, np.inf))
                else:
                    raise PrivacyError(f"no scale near {scale} makes {backend.name}'s privacy map <= {float(eps)}")
            out.append(Budget(lv, query, eps, delta_q, scale))
    check_spent(out, total)
    return out


def check_spent(budget: list[Budget], epsilon: Fraction) -> None:
    """The measurements spend at most ε (or ρ), in exact arithmetic."""
    spent = sum(b.spent() for b in budget)
    if spent > epsilon:
        raise PrivacyError(f"the level budgets spend {float(spent)!r} > {float(epsilon)!r}")


@dataclass
class Measurements:
    """The noisy measurements of a tree: per level, detailed (nodes × types) and tables (nodes ×
    cells), int64 (with a leading runs axis for the auditor's batches); the budgets they were made
    with; and the invariants published exactly (``root_total``: the root's person count)."""

    detailed: list[np.ndarray]
    tables: list[np.ndarray]
    budgets: list[Budget]
    root_total: int | None = None

    def budget(self, level: str, query: str) -> Budget:
        return next(b for b in self.budgets if b.level == level and b.query == query)


def measure(tree: Tree, epsilon: float, backend, strategy: Strategy, privacy: TopDownPrivacy, runs=None,
            cells: dict | None = None) -> tuple[Measurements, Mechanism]:
    """The private step: noise on the int64 detailed histograms and table counts of every node,
    through ``backend``, at each (level, query)'s scale from :func:`budgets`: discrete Laplace under
    pure ε-DP (the levels and queries compose to ε), or the discrete Gaussian under zero-concentrated
    DP as 2020 production ran it (their ρ add up to the ρ that converts to (ε, δ)). The ``root_total``
    invariant publishes the root's person count exactly (declared, not in ε; allowed only under
    replace-one, where n is the same for neighbours).

    Each (level, query) is one stream of the backend's key schedule (stream 2·level + query), its
    cells numbered node by node. ``runs`` measures that many releases at once, or the listed release
    numbers (a single release is the batch of the backend's one release: one path). ``cells`` maps
    (level index, query name) to flat cell numbers to draw only those (the auditor's pairs: with a
    keyed backend, the same values as the whole release's cells); the others are then empty. ``privacy``: the
    relation, shares, accounting and invariants (:class:`TopDownPrivacy`)."""
    relation, shares, invariants = parse_relation(privacy.relation), privacy.shares, privacy.invariants
    accounting, delta = privacy.accounting, privacy.delta
    tree.shape.check()
    if "root_total" in invariants and relation is not Relation.REPLACE_ONE:
        raise PrivacyError(
            "the root_total invariant publishes the root's exact person count, which adding or removing one "
            "person changes (ε = ∞ under add_remove): declare relation: replace_one, or drop the invariant")
    bud = budgets(tree.levels, epsilon, strategy, privacy, backend)
    gaussian = accounting == "zcdp"
    if gaussian and not hasattr(backend, "add_gaussian"):
        raise PrivacyError(f"the {backend.name} backend has no discrete Gaussian sampler")
    detailed, tables = [], []
    releases = releases_of(runs)
    for li, (lv, hist) in enumerate(zip(tree.levels, tree.hist)):
        for qi, query in enumerate(QUERIES):
            exact = hist if query == "detailed" else strategy.tabulate(hist)
            b = next(x for x in bud if x.level == lv and x.query == query)
            idx = None if cells is None else np.asarray(cells.get((li, query), []), dtype=np.int64)
            flat = exact.ravel() if idx is None else exact.ravel()[idx]
            out = noisy(backend, flat, b.scale, stream=2 * li + qi, releases=releases, cells=idx, gaussian=gaussian)
            if idx is None:
                out = out.reshape(len(out), *exact.shape)
            (detailed if query == "detailed" else tables).append(out[0] if runs is None else out)
    root_total = int(tree.hist[0][0].sum()) if "root_total" in invariants else None
    what = "rho" if gaussian else "epsilon"
    per_level = {lv: {"share": str(level_shares(tree.levels, shares)[lv]),
                      **{b.query: {what: float(b.epsilon), ("l2_squared_sensitivity" if gaussian else "sensitivity"):
                                   b.sensitivity, ("sigma" if gaussian else "scale"): b.scale}
                         for b in bud if b.level == lv}} for lv in tree.levels}
    spent = sum(b.spent() for b in bud)
    details = {"levels": per_level, "cells_per_person": strategy.cells_per_person(),
               "detailed_share": str(strategy.detailed_share), "accounting": "zCDP" if gaussian else "pure ε-DP",
               f"{what}_spent_exact": f"{spent.numerator}/{spent.denominator}",
               "composition": f"basic: every level's detailed histogram and tables add up to at most {what} "
                              "(exact arithmetic)",
               "invariants": list(invariants) or "none",
               "reference": "2020 Census TopDown (detailed histogram + tables per node, top-down estimation, MDF)"
                            + ("; discrete Gaussian under zCDP, as production" if gaussian else
                               "; discrete Laplace under pure ε-DP in place of production's discrete Gaussian")}
    if gaussian:
        details.update(rho=float(spent), delta=delta, epsilon_at_delta=epsilon_of(float(spent), delta),
                       conversion="ε = ρ + 2√(ρ ln(1/δ)) (Bun and Steinke 2016)")
    mech = Mechanism("topdown", relation, max(b.sensitivity for b in bud), epsilon, None, details=details)
    return Measurements(detailed, tables, bud, root_total), mech


# ---- estimation: post-processing of the measurements alone --------------------------------------


def laplace_variance(scale: float) -> float:
    """Variance of the discrete Laplace with scale t: 2r/(1 − r)², r = e^{−1/t}."""
    r = math.exp(-1.0 / scale)
    return 2.0 * r / (-math.expm1(-1.0 / scale)) ** 2


def project_simplex(y: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Column by column, the non-negative z closest to y (Euclidean) with Σ z = total (a projection
    onto a scaled simplex; closed form)."""
    y = np.asarray(y, dtype=np.float64)
    total = np.asarray(total, dtype=np.float64)
    n = y.shape[0]
    u = -np.sort(-y, axis=0)
    css = np.cumsum(u, axis=0) - total[None, :]
    k = np.arange(1, n + 1)[:, None]
    ok = u - css / k > 0
    rho = n - 1 - np.argmax(ok[::-1], axis=0)
    tau = css[rho, np.arange(y.shape[1])] / (rho + 1)
    z = np.maximum(y - tau[None, :], 0.0)
    z[:, total <= 0] = 0.0
    return z


def round_keeping_sums(z: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Integers closest to ``z`` in L1 whose columns sum to ``total`` (z ≥ 0, columns summing to
    ``total``): each entry's floor, plus one for the largest fractional parts of its column.

    Optimal: an integer column with the right sum moves each entry to its floor or its ceiling (any
    other integer is further away and can be traded for one of those), the floors leave a deficit of
    exactly ``total − Σ floor`` ones to hand out, and each one handed to entry i costs 1 − 2·frac_i
    more than leaving it at the floor, least for the largest fractions."""
    fl = np.floor(z + 1e-9)
    rem = (np.asarray(total) - fl.sum(axis=0)).round().astype(np.int64)
    order = np.argsort(-(z - fl), axis=0, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(z.shape[0])[:, None].repeat(z.shape[1], axis=1), axis=0)
    return (fl + (rank < rem[None, :])).astype(np.int64)


#: QP solvers :func:`solve_children` can use (``bench/run.py`` compares them).
SOLVERS = ("clarabel", "highs", "osqp")


def solve_children(detailed: tuple[np.ndarray, float], tables: tuple[np.ndarray, float], a: sp.csr_matrix,
                   parent: np.ndarray | None, total: float | None = None, solver: str = "clarabel") -> np.ndarray:
    """min Σ_c wd‖x_c − yd_c‖² + wt‖A x_c − yt_c‖² over x ≥ 0 (children × types), ``detailed`` = (yd, wd) the
    children's noisy detailed histograms and their weight, ``tables`` = (yt, wt) their noisy tables and theirs, with
    Σ_c x_c = ``parent`` cell by cell when a parent is given, and Σ x = ``total`` when given (the
    root's invariant). The residuals r_c = A x_c − yt_c are variables, so the problem stays sparse
    (A's columns are the person types, most tables count many of them)."""
    (yd, wd), (yt, wt) = detailed, tables
    m, s = yd.shape
    k = a.shape[0]
    nx, nr = m * s, m * k
    P = sp.diags(np.concatenate([np.full(nx, wd), np.full(nr, wt)]).astype(np.float64), format="csc")
    q = np.concatenate([-wd * yd.ravel(), np.zeros(nr)])
    blocks = [sp.hstack([sp.kron(sp.eye(m), a), -sp.eye(nr)])]  # A x_c − r_c = yt_c
    rhs = [yt.ravel().astype(np.float64)]
    if parent is not None:
        blocks.append(sp.hstack([sp.kron(np.ones((1, m)), sp.eye(s)), sp.csr_matrix((s, nr))]))
        rhs.append(np.asarray(parent, dtype=np.float64))
    if total is not None:
        blocks.append(sp.hstack([sp.csr_matrix(np.ones((1, nx))), sp.csr_matrix((1, nr))]))
        rhs.append(np.array([float(total)]))
    Aeq = sp.vstack(blocks, format="csc")
    beq = np.concatenate(rhs)
    n = nx + nr
    if solver == "clarabel":
        import clarabel

        G = sp.vstack([Aeq, -sp.eye(n, format="csc")[:nx]], format="csc")
        h = np.concatenate([beq, np.zeros(nx)])
        cones = [clarabel.ZeroConeT(Aeq.shape[0]), clarabel.NonnegativeConeT(nx)]
        settings = clarabel.DefaultSettings()
        settings.verbose = False
        sol = clarabel.DefaultSolver(sp.triu(P, format="csc"), q, G, h, cones, settings).solve()
        x = np.asarray(sol.x)
    elif solver == "osqp":
        import osqp

        G = sp.vstack([Aeq, sp.eye(n, format="csc")[:nx]], format="csc")
        lo = np.concatenate([beq, np.zeros(nx)])
        hi = np.concatenate([beq, np.full(nx, np.inf)])
        prob = osqp.OSQP()
        prob.setup(sp.triu(P, format="csc"), q, G, lo, hi, verbose=False, eps_abs=1e-6, eps_rel=1e-6,
                   max_iter=20000, polishing=True)
        x = np.asarray(prob.solve().x)
    elif solver == "highs":
        import highspy

        from censusrecon.reconstruct.exact import highs_instance, highs_lp

        model = highspy.HighsModel()
        lb = np.concatenate([np.zeros(nx), np.full(nr, -np.inf)])
        model.lp_ = highs_lp(highspy, Aeq, q, lb, np.full(n, np.inf), beq, beq)
        hess = highspy.HighsHessian()
        hess.dim_ = n
        hess.format_ = highspy.HessianFormat.kTriangular
        Pc = sp.tril(P, format="csc")
        hess.start_, hess.index_, hess.value_ = Pc.indptr, Pc.indices, Pc.data
        model.hessian_ = hess
        h = highs_instance(highspy, model)
        h.run()
        x = np.asarray(h.getSolution().col_value)
    else:
        raise PrivacyError(f"unknown QP solver {solver!r}; use one of {SOLVERS}")
    return np.maximum(x[:nx].reshape(m, s), 0.0)


def _weights(meas: Measurements, level: str) -> tuple[float, float]:
    """The detailed and the tables measurements' weights, 1/variance, scaled so the larger is 1 (only
    their ratio matters, and it keeps the QP well scaled), the smaller at least 1e-6 (so that neither
    measurement is ignored when the noise is almost nil and its variance underflows)."""
    var = [max(meas.budget(level, q).variance(), 1e-300) for q in QUERIES]
    low = min(var)
    return max(low / var[0], 1e-6), max(low / var[1], 1e-6)


def _total_rounding(x: np.ndarray, total: int) -> np.ndarray:
    z = project_simplex(x[:, None], np.array([float(total)]))
    return round_keeping_sums(z, np.array([total]))[:, 0]


def estimate(shape: TreeShape, meas: Measurements, strategy: Strategy, solver: str = "clarabel") -> list[np.ndarray]:
    """Top-down estimation, from the measurements alone: the root's non-negative histogram closest to
    its measurements (with its total pinned by the ``root_total`` invariant, else the rounded total of
    the fit), rounded to integers; then for each parent, its children's non-negative histograms
    closest in weighted least squares (weights 1/variance) to their detailed and table measurements,
    adding up cell by cell to the parent's integer histogram (a child's cell can be positive only
    where the parent's is, so each problem is over the parent's support), rounded to integers that
    keep every parent cell exactly and move the children least in L1. Returns per level the
    (nodes × types) int64 histograms."""
    if meas.detailed[0].ndim != 2:
        raise PrivacyError("estimation takes one release, not a batch of runs")
    wd, wt = _weights(meas, shape.levels[0])
    x = solve_children((meas.detailed[0].astype(np.float64), wd), (meas.tables[0].astype(np.float64), wt),
                       strategy.tables, None, meas.root_total, solver)[0]
    total = meas.root_total if meas.root_total is not None else int(round(x.sum()))
    est = [_total_rounding(x, max(total, 0))[None, :]]
    for lv in range(1, len(shape.levels)):
        out = np.zeros((len(shape.ids[lv]), strategy.types), dtype=np.int64)
        wd, wt = _weights(meas, shape.levels[lv])
        for p in range(len(shape.ids[lv - 1])):
            kids = np.flatnonzero(shape.parent[lv] == p)
            support = np.flatnonzero(est[lv - 1][p] > 0)
            if kids.size == 0 or support.size == 0:
                continue
            parent = est[lv - 1][p, support]
            a = strategy.tables[:, support]
            used = np.flatnonzero(a.getnnz(axis=1) > 0)  # cells no type of the support lies in stay 0
            x = solve_children((meas.detailed[lv][kids][:, support].astype(np.float64), wd),
                               (meas.tables[lv][kids][:, used].astype(np.float64), wt), a[used], parent, None, solver)
            z = project_simplex(x, parent.astype(np.float64))  # exact column sums whatever the solver's tolerance
            out[np.ix_(kids, support)] = round_keeping_sums(z, parent)
        est.append(out)
    return est


def check_consistent(shape: TreeShape, est: list[np.ndarray]) -> None:
    """Every node's histogram is non-negative and equals the sum of its children's, cell by cell."""
    for lv in range(len(shape.levels)):
        if est[lv].min(initial=0) < 0:
            raise PrivacyError(f"level {shape.levels[lv]}: a negative estimate")
        if lv:
            if not np.array_equal(children_sum(shape, lv, est[lv]), est[lv - 1]):
                raise PrivacyError(f"level {shape.levels[lv]}: children do not add up to their parent")


def mdf_rows(leaf_hist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The microdata detail file of the leaves' integer histograms: one row per person, its leaf
    node and its person type (row-major over the person domain)."""
    leaf, types = np.nonzero(leaf_hist)
    reps = leaf_hist[leaf, types]
    return np.repeat(leaf, reps), np.repeat(types, reps)
