"""ε as risk to one person, rendered from the decision: the lines the terminal prints, the report's section and
its plot (TPR at the rule's FPR against ε, one line per attack, DP's bound dashed)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from censusrecon.experiments.release.inference_verdict import ATTACK_WORDS
from censusrecon.synth import registry

#: what each adversary knows, in one sentence (the terminal's and the report's)
ADVERSARIES = ("The informed adversary knows every person's record but the target's, and two candidates for it: the "
               "attacker DP's ε is defined against. The realistic adversary knows only outside data (the persons of "
               "the county, state or nation around the unit) and, for attribute inference, every person's other "
               "attributes.")


def _num(x) -> bool:
    """Whether ``x`` is a figure (not missing, not NaN)."""
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def _pct(x) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * float(x):.1f}%"


def _setting(mech: str, s: float) -> str:
    return "exact tables" if not math.isfinite(s) else registry.label(mech, s)


def risk_table(m, fpr: float) -> tuple[list[str], list[list[str]]]:
    """The rows of one mechanism's risk table: header and rows, a row per setting (the exact tables first)."""
    f = f"{100 * fpr:g}%"
    header = ["setting", f"informed TPR at {f} FPR", "DP's bound", "ε shown", f"realistic TPR at {f} FPR",
              "attribute accuracy (best guess)", "persons beyond the best guess"]
    rows = []
    for r in m.risk:
        persons = "–"
        if "persons_excess" in r:
            persons = (_pct(r["persons_excess"]) if r.get("persons_scale") == "share" else
                       f"{r['persons_excess']:+.1f} per unit")
        informed = (f"{_pct(r['informed_tpr'])} ({_pct(r['informed_tpr_low'])}–{_pct(r['informed_tpr_high'])})"
                    if _num(r.get("informed_tpr")) else
                    f"– (AUC {r['informed_auc']:.2f}; {r.get('informed_non_members', 0):,.0f} releases)"
                    if "informed_auc" in r else ("always (no noise)" if not math.isfinite(r["setting"]) else "–"))
        rows.append([_setting(m.mechanism, r["setting"]), informed, _pct(r.get("dp_bound")) if "dp_bound" in r else "–",
                     f"{r['epsilon_lower_bound']:.2f}" if "epsilon_lower_bound" in r else "–",
                     _pct(r.get("realistic_tpr")) if "realistic_tpr" in r else "–",
                     (f"{_pct(r['attribute_accuracy'])} ({_pct(r['guess_accuracy'])})" if "attribute_accuracy" in r
                      else "–"), persons])
    return header, rows


def risk_lines(m, fpr: float) -> list[str]:
    """The terminal's lines of one mechanism's risk to one person, and its gates."""
    if not m.risk:
        return []
    header, rows = risk_table(m, fpr)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    out = ["  risk to one person (informed: knows every other record; realistic: outside data only):"]
    out.append("    " + "  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    out += ["    " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    for g in m.gates:
        out.append("  " + gate_line(m.mechanism, g))
    return out


def gate_line(mech: str, g: dict) -> str:
    """One gate in a line: 'realistic membership inference: within 2 points up to ε = 3'."""
    what, tol = ATTACK_WORDS[g["attack"]], f"{100 * g['tolerance']:g} points"
    if g["status"] == "safe":
        return f"{what}: within {tol} up to {registry.label(mech, g['setting'])}"
    if g["status"] == "none_safe":
        return f"{what}: above {tol} even at the most protective setting"
    if g["status"] == "not_shown_safe":
        return f"{what}: not shown within {tol} at any setting"
    return f"{what}: not played ({g['note']})"


def risk_section(doc, decision, fpr: float, run_dir: Path) -> None:
    """The report's section: what each adversary knows, the plot, and a table per mechanism."""
    mechs = [m for m in decision.mechanisms if m.risk]
    if not mechs:
        return
    doc.h(2, "What each ε means for one person")
    doc.p(ADVERSARIES + f" TPR: the share of members an attack finds when it wrongly accuses {100 * fpr:g}% of "
          "non-members. DP's bound is the most any attack can find at that rate; an attack above it would show the "
          "code spends more than its ε. *ε shown*: the least ε the informed attack's success proves, at 95% confidence.")
    path = plot_risk(decision, fpr, run_dir)
    if path is not None:
        doc.img(path, "TPR at the rule's FPR against ε, per attack, with DP's bound")
    for m in mechs:
        header, rows = risk_table(m, fpr)
        doc.p(f"**{m.mechanism}**" + (f": decided by {m.decided_by}" if m.decided_by else ""))
        doc.table(header, rows, numeric={1, 2, 3, 4, 5, 6})
        doc.ul([gate_line(m.mechanism, g) for g in m.gates])


def plot_risk(decision, fpr: float, run_dir: Path) -> Path | None:
    """risk_tpr.png: per DP mechanism, TPR at ``fpr`` against ε for the informed and realistic attacks, and DP's
    bound dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mechs = [m for m in decision.mechanisms if m.risk and registry.is_dp(m.mechanism)]
    mechs = [m for m in mechs if any(math.isfinite(r["setting"]) for r in m.risk)]
    if not mechs:
        return None
    fig, axes = plt.subplots(1, len(mechs), figsize=(4.2 * len(mechs), 3.6), squeeze=False, sharey=True)
    for ax, m in zip(axes[0], mechs):
        rows = sorted((r for r in m.risk if math.isfinite(r["setting"])), key=lambda r: r["setting"])
        eps = np.array([r["setting"] for r in rows])
        for key, style in (("informed", "o-"), ("realistic", "s-")):
            pts = [(r["setting"], max(r[f"{key}_tpr"], fpr / 3)) for r in rows if _num(r.get(f"{key}_tpr"))]
            if pts:
                ax.plot(*zip(*pts), style, label=f"{key} membership")
        grid = np.geomspace(eps.min(), eps.max(), 60) if len(eps) > 1 else eps
        ax.plot(grid, [min(1.0, math.exp(e) * fpr) for e in grid], "k--", label="DP's bound")
        ax.axhline(fpr, color="grey", lw=0.8, ls=":", label="a guess")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(fpr / 3, 1.05)
        ax.set_title(m.mechanism, fontsize=10)
        ax.set_xlabel("ε")
    axes[0][0].set_ylabel(f"TPR at {100 * fpr:g}% FPR")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = Path(run_dir) / "risk_tpr.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
