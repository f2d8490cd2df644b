"""What the inference attacks say of each mechanism: per attack, the settings shown within the tolerance (its gate),
and per setting one row of risk to one person (ε as risk), beside DP's own bound.

A gate reads an attack's figure on every target (the group ``random``) at each setting, from the most protective,
and stops at the first setting not shown within the tolerance, as the persons' verdict does. The realistic attacks
always gate; the informed adversary's only where the agency declares a tolerance for it
(``release.tolerance.informed_membership``). The atypical targets' figures are shown beside, not gated: they
rest on a tenth of the targets and their intervals are wide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from censusrecon.experiments.release.inference_games import ATTRIBUTE, INFORMED, REALISTIC
from censusrecon.synth import registry

#: each gated attack: its table (membership or attribute), the figure the rule reads and its limits, in words
_MEASURE = {REALISTIC: ("membership", "advantage", "realistic membership advantage (TPR − FPR)"),
            INFORMED: ("membership", "advantage", "informed membership advantage (TPR − FPR)"),
            ATTRIBUTE: ("attribute", "excess", "attribute inference's accuracy over the best guess")}
#: the attacks' names as a decision says them
ATTACK_WORDS = {REALISTIC: "realistic membership inference", INFORMED: "informed membership inference",
                ATTRIBUTE: "attribute inference (linear reconstruction)"}


@dataclass(frozen=True)
class Gate:
    """One attack's verdict on one mechanism: ``status`` safe (shown within the tolerance up to ``setting``),
    not_shown_safe (not even at the most protective setting), none_safe (shown above it there) or not_run (why in
    ``note``); ``margin`` the tolerance minus the upper limit at ``setting`` (how close it came)."""

    attack: str
    status: str
    setting: float | None
    tolerance: float
    note: str = ""
    margin: float | None = None

    def as_dict(self) -> dict:
        return {"attack": self.attack, "status": self.status, "setting": self.setting, "tolerance": self.tolerance,
                "note": self.note, "margin": self.margin}


def protective_order(mech: str, settings) -> list[float]:
    """``settings`` from the most protective: smallest ε first; largest swap rate first for one that is not DP."""
    return sorted(settings, reverse=not registry.is_dp(mech))


def gates(mech: str, settings: list[float], membership: pd.DataFrame, attribute: pd.DataFrame,
          notes: pd.DataFrame, tolerance) -> list[Gate]:
    """The gates of ``mech`` over its ``settings``: realistic membership and attribute inference always, the informed
    adversary where ``tolerance.informed_membership`` is set. Several variants (with and without BLOCK): a setting
    is within the tolerance only where every variant shows it."""
    wanted = {REALISTIC: tolerance.membership_advantage, ATTRIBUTE: tolerance.attribute}
    if tolerance.informed_membership is not None:
        wanted[INFORMED] = tolerance.informed_membership
    out = []
    order = protective_order(mech, settings)
    for attack, tol in wanted.items():
        table, figure, _ = _MEASURE[attack]
        frame = membership if table == "membership" else attribute
        rows = _rows(frame, mech, attack)
        status, last, margin, note = "safe", None, None, ""
        for i, s in enumerate(order):
            at = rows[rows["setting"] == s] if len(rows) else rows
            if not len(at):
                status = "not_run"
                note = _why_not(notes, mech, s, attack)
                break
            upper = float(at[f"{figure}_upper"].max())  # the worst variant
            if math.isnan(upper):  # too few non-members to read the rule's FPR
                status = "not_run"
                note = (f"too few non-members to read TPR at its FPR ({int(at['non_members'].min()):,}; it needs "
                        f"{int(at['needs'].max()):,}): evaluate more units, or more persons per unit")
                break
            if upper < tol:
                last, margin = s, tol - upper
                continue
            if i == 0:
                status = "none_safe" if float(at[f"{figure}_lower"].max()) > tol else "not_shown_safe"
            break
        if status == "not_run" and last is not None:
            status = "safe"  # the settings before the one not played are decided; the rest stay undecided
        out.append(Gate(attack, status, last, float(tol), note, margin))
    return out


def _rows(frame: pd.DataFrame, mech: str, attack: str) -> pd.DataFrame:
    if frame is None or not len(frame):
        return pd.DataFrame(columns=["setting"])
    return frame[(frame["mechanism"] == mech) & (frame["attack"] == attack) & (frame["group"] == "random")]


def _why_not(notes: pd.DataFrame, mech: str, setting: float, attack: str) -> str:
    if notes is None or not len(notes):
        return "not played (release.inference.run is false, or the evaluation predates it)"
    hit = notes[(notes["mechanism"] == mech) & (notes["attack"] == attack) & (notes["setting"] == setting)]
    return str(hit["note"].iloc[0]) if len(hit) else "not played"


def risk_rows(mech: str, settings: list[float], membership: pd.DataFrame, attribute: pd.DataFrame,
              persons: pd.DataFrame | None, variant) -> list[dict]:
    """ε as risk to one person, a row per setting of ``mech`` (and the exact tables first, the yardstick): the
    informed adversary's TPR at the rule's FPR with its interval and DP's bound, the ε its success implies, the
    realistic adversary's TPR and advantage, attribute inference's accuracy beside the best guess's, and the persons
    reconstructed beyond the best guess; each for every target and for the atypical ones."""
    out = []
    for mechanism, setting in [("exact", math.inf)] + [(mech, s) for s in protective_order(mech, settings)]:
        row = {"mechanism": mechanism, "setting": setting}
        for group in ("random", "atypical"):
            tag = "" if group == "random" else "atypical_"
            for attack, key in ((INFORMED, "informed"), (REALISTIC, "realistic")):
                m = _one(membership, variant, mechanism, setting, attack, group)
                if m is not None:
                    row.update({f"{tag}{key}_non_members": m["non_members"],
                                f"{tag}{key}_tpr": m["tpr"], f"{tag}{key}_tpr_low": m["tpr_low"],
                                f"{tag}{key}_tpr_high": m["tpr_high"], f"{tag}{key}_fpr": m["fpr"],
                                f"{tag}{key}_advantage_upper": m["advantage_upper"],
                                f"{tag}{key}_auc": m["auc"], f"{tag}{key}_tpr_low_fpr": m["tpr_low_fpr"]})
                    if key == "informed":
                        row[f"{tag}dp_bound"] = m["dp_bound"]
                        row[f"{tag}epsilon_lower_bound"] = m["epsilon_lower_bound"]
            a = _one(attribute, variant, mechanism, setting, ATTRIBUTE, group)
            if a is not None:
                row.update({f"{tag}attribute_accuracy": a["accuracy"], f"{tag}guess_accuracy": a["guess_accuracy"],
                            f"{tag}attribute_excess_upper": a["excess_upper"]})
        if persons is not None and len(persons):
            p = persons[(persons["variant"] == variant) & (persons["mechanism"] == mechanism)
                        & (persons["setting"] == setting)]
            if len(p):
                row.update({"persons_excess": float(p["excess_mean"].iloc[0]),
                            "persons_excess_upper": float(p["excess_upper"].iloc[0]),
                            "persons_scale": str(p["scale"].iloc[0])})
        if len(row) > 2:
            out.append({k: (float(v) if isinstance(v, (np.floating, np.integer)) else v) for k, v in row.items()})
    return out


def _one(frame: pd.DataFrame, variant, mechanism: str, setting: float, attack: str, group: str):
    if frame is None or not len(frame):
        return None
    hit = frame[(frame["variant"] == variant) & (frame["mechanism"] == mechanism) & (frame["setting"] == setting)
                & (frame["attack"] == attack) & (frame["group"] == group)]
    return None if not len(hit) else hit.iloc[0]


def gate_words(gate: Gate, mech: str) -> str:
    """A closed gate as a decision's reason."""
    what = ATTACK_WORDS[gate.attack]
    tol = f"{100 * gate.tolerance:g} percentage points"
    if gate.status == "none_safe":
        return f"{what} is shown above its tolerance ({tol}) even at the most protective setting"
    if gate.status == "not_shown_safe":
        return f"{what} is not shown within its tolerance ({tol}) at any setting"
    if gate.status == "not_run":
        return f"{what} was not played: {gate.note}"
    return ""
