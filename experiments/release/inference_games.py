"""The membership and attribute games on one unit's releases, played where the truth is known, and their figures
pooled over units.

Each game is played by the evaluation, which knows the private data; the attacks in it
(:mod:`reconstruct.inference`) see only a release and what their adversary knows.

- **Informed membership.** For each target, the evaluation builds two worlds: D as it is, and D with the target's
  record replaced by another candidate (replace-one) or removed (add-remove). It draws many releases of each world
  through the mechanism's own publishing function. The informed adversary, who knows everything but which world it
  is in, scores each release. Targets are half random persons, half the most atypical under the outside data.
- **Realistic membership.** Members are the persons a release covers; non-members are persons of the same unit it
  does not cover (D_holdout). The realistic adversary scores every one of them from the release and outside data.
- **Attribute inference.** The adversary knows every person's other attributes and infers the secret one from the
  release; the best guess infers it from outside data alone.

Every game's draws are keyed by the experiment's seed, so the same config gives the same figures on any machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from censusrecon.baselines.attribute import best_guess_secret
from censusrecon.experiments.metrics import CONFIDENCE
from censusrecon.synth.audit.roc import (GameError, auc, dp_tpr_bound, epsilon_lower_bound, releases_needed,
                                        tpr_at_fpr)
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.seeds import stable_seed
from censusrecon.reconstruct.inference import (NoiseLaw, cell_incidence, density_ratio_scores, informed_scores,
                                               linear_reconstruction, reference_log_density)
from censusrecon.synth.release_draws import Drawer

#: the attacks' names in results (each also an attack of reconstruct.attacks' registry)
INFORMED = "membership_informed"
REALISTIC = "membership_realistic"
ATTRIBUTE = "attribute_linear"
#: the adversary each attack assumes
ADVERSARY = {INFORMED: "informed", REALISTIC: "realistic", ATTRIBUTE: "realistic"}
#: target groups: every target, and the most atypical under the outside data
GROUPS = ("random", "atypical")
#: the FPRs every membership figure is read at (the rule's is release.inference.fpr)
FPRS = (0.001, 0.01)


@dataclass
class UnitGames:
    """The games of one unit and variant: its D (members), D_holdout (non-members; empty where the evaluation
    covers whole units), the published workload and D's exact counts, the outside data the realistic adversary and
    the best guess read (``reference``, over the unit's domain; None: there is none), the settings
    (``release.inference``), the relation and the seed's parts."""

    D: Dataset
    H: Dataset
    workload: object
    exact_counts: np.ndarray
    reference: Dataset | None
    settings: object
    replace: bool
    seed_parts: tuple
    secret: str
    _targets: list = field(default_factory=list)

    def __post_init__(self):
        self.inc_D = cell_incidence(self.workload, self.D.codes)
        self.inc_H = cell_incidence(self.workload, self.H.codes) if len(self.H) else None
        self.ref_counts = (cell_incidence(self.workload, self.reference.codes).sum(axis=0).A1.astype(np.float64)
                           if self.reference is not None else None)
        rng = np.random.default_rng(stable_seed("inference-targets", *self.seed_parts))
        typical = (reference_log_density(self.inc_D, self.ref_counts) if self.ref_counts is not None
                   else np.zeros(len(self.D)))
        self.typical_D = typical
        self._targets = self._informed_targets(typical, rng)

    # ---- informed membership --------------------------------------------------------------------------------

    def _informed_targets(self, typical: np.ndarray, rng: np.random.Generator) -> list[tuple]:
        """(person index, group, alternative record) per informed target: half the most atypical persons of D,
        half drawn at random from the rest; the alternative takes every attribute but BLOCK from an outside person
        who differs from the target in all of them (any who differs, where none does)."""
        n = len(self.D)
        k = min(self.settings.informed_targets, n)
        # no outside data: nobody is known to be atypical, every target is drawn at random
        atypical = list(np.argsort(typical, kind="stable")[: k // 2]) if self.ref_counts is not None else []
        rest = np.setdiff1d(np.arange(n), atypical)
        chosen = [(int(i), "atypical") for i in atypical]
        chosen += [(int(i), "random") for i in rng.choice(rest, size=min(k - len(chosen), len(rest)), replace=False)]
        names = list(self.D.domain.names)
        free = [j for j, a in enumerate(names) if a != "BLOCK"]
        pool = self.reference.codes if self.reference is not None and len(self.reference) else self.D.codes
        out = []
        for i, group in chosen:
            x = self.D.codes[i]
            differ_all = np.all(pool[:, free] != x[free], axis=1)
            differ_any = np.any(pool[:, free] != x[free], axis=1)
            cand = np.flatnonzero(differ_all) if differ_all.any() else np.flatnonzero(differ_any)
            alt = x.copy()
            if cand.size:
                alt[free] = pool[rng.choice(cand), free]
            elif self.replace:
                alt[free[0]] = (x[free[0]] + 1) % self.D.domain.sizes[free[0]]
            out.append((i, group, alt))
        return out

    def informed(self, drawer: Drawer, tag: tuple) -> pd.DataFrame:
        """Scores of the informed adversary on ``drawer``'s releases: per target, ``drawer.releases`` releases of
        each world, a row per release (``member``: the target's record was in)."""
        if not self._targets:
            raise GameError("the informed game has no targets: the unit has no persons")
        rows = []
        R = drawer.releases
        dom = self.D.domain
        targets = self._targets
        if drawer.slow:  # half the targets, as many of each group as of the other
            groups = [[x for x in targets if x[1] == g] for g in ("atypical", "random")]
            groups = [g for g in groups if g]
            half = max(1, len(targets) // (2 * len(groups)))
            targets = [x for g in groups for x in g[:half]]
        for t, (i, group, alt) in enumerate(targets):
            keep = np.ones(len(self.D), bool)
            keep[i] = False
            out_codes = np.vstack([self.D.codes[keep], alt[None, :]]) if self.replace else self.D.codes[keep]
            D_out = Dataset(dom, out_codes)
            if drawer.space == "histogram":
                keys = np.unique(dom.encode(np.stack([self.D.codes[i], alt])))
                cells = keys
                x_in = np.array([(self.D.keys() == k).sum() for k in keys], np.float64)
                x_out = np.array([(D_out.keys() == k).sum() for k in keys], np.float64)
            else:
                d = (cell_incidence(self.workload, self.D.codes[i:i + 1]).toarray()[0]
                     - (cell_incidence(self.workload, alt[None, :]).toarray()[0] if self.replace else 0))
                cells = np.flatnonzero(d)
                x_in = self.exact_counts[cells].astype(np.float64)
                x_out = x_in - d[cells]
            if not cells.size:
                continue  # the candidates publish alike: nothing to tell them apart by
            base = 2 * R * t
            y_in = drawer.draw(self.D, list(range(base, base + R)), cells)
            y_out = drawer.draw(D_out, list(range(base + R, base + 2 * R)), cells)
            law = drawer.law
            if drawer.fit_law is not None:  # the adversary runs the program on its own worlds to learn its noise
                law = NoiseLaw.fit(drawer.fit_law, np.concatenate([(y_in - x_in).ravel(), (y_out - x_out).ravel()]))
            for y, member in ((y_in, True), (y_out, False)):
                s = informed_scores(y, x_in, x_out, law)
                rows.append(pd.DataFrame({"attack": INFORMED, "group": group, "target": t, "member": member,
                                          "score": s.astype(np.float64)}))
        return _tagged(pd.concat(rows, ignore_index=True) if rows else _empty_scores(), tag)

    # ---- realistic membership -------------------------------------------------------------------------------

    def realistic(self, published: np.ndarray, tag: tuple, members: Dataset | None = None,
                  non_members: Dataset | None = None, rows: Dataset | None = None) -> pd.DataFrame:
        """Scores of the realistic adversary on one release's counts (``published``, workload order): each member
        (D, or ``members``) and each non-member (D_holdout, or ``non_members``: the other half, where the release
        was drawn for a half of the unit), by the density ratio of the release to the outside data on the cells it
        publishes; where it publishes ``rows``, also on each whole record (how often it appears among them)."""
        if self.ref_counts is None:
            raise GameError("the realistic adversary needs outside data (a geographic baseline or chance), and this "
                            "evaluation has none: list county, state or national in baselines")
        inc_in = self.inc_D if members is None else cell_incidence(self.workload, members.codes)
        inc_out = self.inc_H if non_members is None else cell_incidence(self.workload, non_members.codes)
        if inc_out is None or inc_out.shape[0] == 0 or inc_in.shape[0] == 0:
            raise GameError("the realistic game needs members and non-members of the same unit: whole units leave "
                            "no non-members (target.whole_units: false keeps a holdout half)")
        published = np.clip(np.asarray(published, dtype=np.float64), 0, None)
        expected = self.ref_counts * (published.sum() / max(self.ref_counts.sum(), 1.0))
        s_in = density_ratio_scores(inc_in, published, expected)
        s_out = density_ratio_scores(inc_out, published, expected)
        if rows is not None:  # the whole record: its copies among the rows against the outside data's share
            dom = self.D.domain
            who_in = self.D if members is None else members
            who_out = self.H if non_members is None else non_members
            s_in = s_in + record_ratio(dom.encode(who_in.codes), rows.keys(), self.reference.keys())
            s_out = s_out + record_ratio(dom.encode(who_out.codes), rows.keys(), self.reference.keys())
        dens = np.concatenate([reference_log_density(inc_in, self.ref_counts),
                               reference_log_density(inc_out, self.ref_counts)])
        cut = np.quantile(dens, self.settings.atypical)
        df = pd.DataFrame({"attack": REALISTIC, "target": np.arange(dens.size),
                           "member": np.r_[np.ones(s_in.size, bool), np.zeros(s_out.size, bool)],
                           "score": np.r_[s_in, s_out], "group": np.where(dens <= cut, "atypical", "random")})
        return _tagged(df, tag)

    # ---- attribute inference -------------------------------------------------------------------------------

    def attribute(self, published: np.ndarray, tag: tuple) -> pd.DataFrame:
        """Per person of D: whether linear reconstruction from the release's counts infers the secret, and
        whether the best guess from outside data does."""
        if self.reference is None:
            raise GameError("attribute inference's best guess needs outside data (a geographic baseline or chance), "
                            "and this evaluation has none: list county, state or national in baselines")
        names = tuple(self.D.domain.names)
        j = names.index(self.secret)
        truth = self.D.codes[:, j]
        guess = best_guess_secret(self.reference, names, self.D.codes, self.secret)
        inferred = linear_reconstruction(self.workload, np.asarray(published, dtype=np.float64), self.D.codes, j)
        cut = np.quantile(self.typical_D, self.settings.atypical)
        df = pd.DataFrame({"attack": ATTRIBUTE, "target": np.arange(len(truth)), "correct": inferred == truth,
                           "guess_correct": guess == truth,
                           "group": np.where(self.typical_D <= cut, "atypical", "random")})
        return _tagged(df, tag)


def record_ratio(keys: np.ndarray, released: np.ndarray, reference: np.ndarray, smoothing: float = 0.5) -> np.ndarray:
    """Per record key of ``keys``: log((its copies among the ``released`` rows + s) / (the copies the outside data
    predicts there + s)), the predicted copies being its share of the ``reference`` times the rows released.

    >>> record_ratio(np.array([1, 2]), np.array([1, 1, 3]), np.array([2, 2, 3, 3])).round(3).tolist()
    [1.609, -1.386]
    """
    rel_keys, rel_n = np.unique(released, return_counts=True)
    ref_keys, ref_n = np.unique(reference, return_counts=True)

    def count(table_keys, table_n, k):
        if not len(table_keys):
            return np.zeros(len(k), dtype=np.int64)
        pos = np.minimum(np.searchsorted(table_keys, k), len(table_keys) - 1)
        return np.where(table_keys[pos] == k, table_n[pos], 0)

    got = count(rel_keys, rel_n, keys).astype(np.float64)
    expected = count(ref_keys, ref_n, keys).astype(np.float64) * len(released) / max(len(reference), 1)
    return np.log(got + smoothing) - np.log(expected + smoothing)


def _empty_scores() -> pd.DataFrame:
    return pd.DataFrame({"attack": pd.Series(dtype=str), "group": pd.Series(dtype=str),
                         "target": pd.Series(dtype=np.int64), "member": pd.Series(dtype=bool),
                         "score": pd.Series(dtype=np.float64)})


def _tagged(df: pd.DataFrame, tag: tuple) -> pd.DataFrame:
    """``df`` with its unit, variant, mechanism and setting (``tag``)."""
    unit, variant, mechanism, setting = tag
    return df.assign(unit=unit, variant=variant, mechanism=mechanism, setting=float(setting))


def default_secret(names) -> str:
    """Attribute inference's secret when the config names none: RACE where there is one, else the last
    attribute that is not BLOCK.

    >>> default_secret(("AGE", "SEX", "RACE", "HISP")), default_secret(("BLOCK", "AGE", "SEX"))
    ('RACE', 'SEX')
    """
    names = [a for a in names if a != "BLOCK"]
    return "RACE" if "RACE" in names else names[-1]


# ---- figures pooled over units -------------------------------------------------------------------------------

#: the columns a summary row of a membership attack carries (beside variant, mechanism, setting, attack, group)
MEMBERSHIP_FIGURES = ("members", "non_members", "tpr_low_fpr", "tpr", "tpr_low", "tpr_high", "fpr", "advantage",
                      "advantage_upper", "advantage_lower", "auc", "epsilon_lower_bound", "dp_bound", "units", "needs")


def summarise_membership(scores: pd.DataFrame, fpr: float, delta_of: Callable[[str, float], float] | None = None,
                         ) -> pd.DataFrame:
    """Per (variant, mechanism, setting, attack, group): TPR at ``fpr`` (the rule's) with its exact interval, the
    advantage TPR − FPR with one-sided 95% limits, TPR at 0.1% FPR, AUC, the ε the success implies, and DP's own
    bound on TPR at the upper limit of the FPR the test met (``delta_of(mechanism, setting)`` gives δ; 0 by
    default): what DP allows at the rate measured. A game with fewer non-members than the FPR needs
    (:func:`synth.audit.roc.releases_needed`, ``needs``) reads no TPR at it (NaN); its AUC and ε shown still stand. The group ``random`` is every
    target, ``atypical`` the least typical ones."""
    if scores is None or not len(scores):
        return pd.DataFrame()
    out = []
    one_sided = 1 - 2 * (1 - CONFIDENCE)  # a two-sided interval whose ends are one-sided 95% limits
    for (v, m, s, a), g in scores.groupby(["variant", "mechanism", "setting", "attack"], sort=False, dropna=False):
        for group in GROUPS:
            part = g if group == "random" else g[g["group"] == "atypical"]
            ins, outs = part.loc[part["member"], "score"].to_numpy(), part.loc[~part["member"], "score"].to_numpy()
            if not ins.size or not outs.size:
                continue
            rng = np.random.default_rng(stable_seed("roc", v, m, s, a, group))
            op = tpr_at_fpr(ins, outs, fpr, one_sided, rng)
            low = tpr_at_fpr(ins, outs, FPRS[0], one_sided, np.random.default_rng(stable_seed("roc0", v, m, s, a, group)))
            delta = delta_of(m, s) if delta_of is not None else 0.0
            row = {"variant": v, "mechanism": m, "setting": float(s), "attack": a, "adversary": ADVERSARY[a],
                   "group": group, "members": ins.size, "non_members": outs.size,
                   "tpr_low_fpr": low.tpr if outs.size >= releases_needed(FPRS[0]) else math.nan,
                   "tpr": op.tpr, "tpr_low": op.tpr_low, "tpr_high": op.tpr_high, "fpr": op.fpr,
                   "advantage": op.advantage, "advantage_upper": op.tpr_high - op.fpr,
                   "advantage_lower": op.tpr_low - op.fpr, "auc": auc(ins, outs),
                   "epsilon_lower_bound": epsilon_lower_bound(op, delta),
                   "dp_bound": dp_tpr_bound(float(s), op.fpr_high, delta) if math.isfinite(float(s)) else 1.0,
                   "units": int(part["unit"].nunique()), "needs": releases_needed(fpr)}
            if outs.size < releases_needed(fpr):  # too few non-members to meet the FPR: no TPR read at it
                row.update({k: math.nan for k in ("tpr", "tpr_low", "tpr_high", "fpr", "advantage", "advantage_upper",
                                                  "advantage_lower", "dp_bound")})
            out.append(row)
    return pd.DataFrame(out)


def summarise_attribute(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (variant, mechanism, setting, group): attribute inference's accuracy, the best guess's, and the excess
    (paired per person) with one-sided 95% limits (normal approximation over persons)."""
    if rows is None or not len(rows):
        return pd.DataFrame()
    from scipy import stats

    z = float(stats.norm.ppf(CONFIDENCE))
    out = []
    for (v, m, s, a), g in rows.groupby(["variant", "mechanism", "setting", "attack"], sort=False, dropna=False):
        for group in GROUPS:
            part = g if group == "random" else g[g["group"] == "atypical"]
            if not len(part):
                continue
            diff = part["correct"].astype(float).to_numpy() - part["guess_correct"].astype(float).to_numpy()
            se = float(diff.std(ddof=1) / math.sqrt(diff.size)) if diff.size > 1 else math.inf
            mean = float(diff.mean())
            out.append({"variant": v, "mechanism": m, "setting": float(s), "attack": a, "adversary": ADVERSARY[a],
                        "group": group, "persons": int(diff.size), "accuracy": float(part["correct"].mean()),
                        "guess_accuracy": float(part["guess_correct"].mean()), "excess": mean,
                        "excess_upper": mean + z * se, "excess_lower": mean - z * se,
                        "units": int(part["unit"].nunique())})
    return pd.DataFrame(out)
