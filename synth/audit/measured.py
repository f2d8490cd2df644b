"""The measured ε: how much privacy the code's noise is shown to spend, beside the ε it declares.

Each audit result carries two lower bounds on what a mechanism spends:

- **black box**: the best event that tells the worst-case neighbours apart in the released outputs (Clopper–Pearson
  on half of the releases, certified on the other half). It assumes nothing of the mechanism, so it is loose where a
  person moves many cells: the whole privacy loss is then reached only by events too rare to see;
- **white box**: what the noise the code actually added spends, from its recorded measurements (the noisy counts of
  every published cell, a synthesizer's ledger of noisy marginals). Each measurement's noise scale is bounded above
  from its own draws, and its sensitivity (found by the audit's yardstick, never the code's figure) over that scale
  is what it spends; the measurements' losses compose. It holds under the premises the audit checks beside it: the
  declared noise family (the shape and tail checks), independence across cells and releases (the independence
  check), and an output that depends on the data only through the measurements (the replay and structure checks).

For discrete Laplace noise the white box is an ε. For Gaussian noise it is a μ in Gaussian DP (Dong, Roth and Su):
Gaussian measurements compose to one Gaussian with μ² = Σ Δ²/σ² = 2ρ, and the ε at the declared δ follows from
Google's ``dp-accounting`` (its privacy-loss distribution of the Gaussian mechanism, the optimistic estimate, so that
a lower bound stays one). The declared side is the μ that the declared (ε, δ) allows by OpenDP's conversion.

:func:`measured_summary` gives both, the larger as the measured ε, and its share of the declared one.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

#: the share of the declared ε (or μ) a measured ε must reach to call the audit tight (issue 80's standard)
TIGHT_SHARE = 0.5


@dataclass(frozen=True)
class WhiteBox:
    """A white-box lower bound on what a mechanism spends, at the audit's confidence.

    Attributes:
        law: ``"laplace"`` (``value`` is an ε) or ``"gaussian"`` (``value`` is a μ in Gaussian DP).
        value: the lower bound, ε or μ.
        declared: what the mechanism declares in the same unit: its ε, or the μ its (ε, δ) allows.
        delta: the declared δ (0 for pure ε).
        how: one sentence on what was measured.
        draws: the noise draws behind it.
    """

    law: str
    value: float
    declared: float
    delta: float
    how: str
    draws: int

    def __post_init__(self):
        if self.law not in ("laplace", "gaussian"):
            raise ValueError(f"a white-box bound's law is 'laplace' or 'gaussian', got {self.law!r}")
        if self.law == "gaussian" and not 0 < self.delta < 1:
            raise ValueError(f"Gaussian noise needs a δ in (0, 1) to state an ε, got δ = {self.delta!r}: set the "
                             "program's or TopDown's delta")

    @property
    def ratio(self) -> float:
        """The bound over what is declared (ε over ε, or μ over μ)."""
        return self.value / self.declared if self.declared > 0 else math.inf

    @property
    def epsilon(self) -> float:
        """The bound as an ε: itself for Laplace noise, the ε at the declared δ of Gaussian DP's μ."""
        return self.value if self.law == "laplace" else gdp_epsilon(self.value, self.delta)

    def as_dict(self) -> dict:
        out = asdict(self)
        out.update(value=round(self.value, 6), declared=round(self.declared, 6), ratio=round(self.ratio, 4),
                   epsilon=round(self.epsilon, 6))
        return out

    @classmethod
    def of(cls, d: dict | None) -> WhiteBox | None:
        """A white-box bound read back from :meth:`as_dict` (None stays None)."""
        if not d:
            return None
        return cls(d["law"], float(d["value"]), float(d["declared"]), float(d["delta"]), d["how"], int(d["draws"]))


def laplace_white_box(epsilon: float, declared: float, how: str, draws: int) -> WhiteBox:
    """The white box of discrete Laplace noise: ``epsilon``, the Σ Δ / scale its noise spends (bounded below).

    >>> laplace_white_box(0.9, 1.0, "tables", 100).ratio
    0.9
    """
    return WhiteBox("laplace", float(epsilon), float(declared), 0.0, how, int(draws))


def gaussian_white_box(rho: float, declared_rho: float, delta: float, how: str, draws: int) -> WhiteBox:
    """The white box of Gaussian noise: ``rho`` (Σ Δ² / 2σ², bounded below) as μ = √(2ρ), against the μ of
    ``declared_rho``, the ρ the declared (ε, ``delta``) allows (by OpenDP's conversion,
    :func:`synth.audit.statistics.opendp_rho`, or the conversion a mechanism declares).

    >>> round(gaussian_white_box(0.5, 0.5, 1e-6, "m", 10).value, 6)
    1.0
    """
    mu = math.sqrt(2 * rho) if math.isfinite(rho) else math.inf
    return WhiteBox("gaussian", mu, math.sqrt(2 * declared_rho), float(delta), how, int(draws))


@functools.lru_cache(maxsize=256)
def gdp_epsilon(mu: float, delta: float) -> float:
    """The ε at ``delta`` of μ-Gaussian DP: the Gaussian mechanism's privacy-loss distribution in Google's
    ``dp-accounting`` (sensitivity 1, σ = 1/μ), its optimistic estimate (a lower bound stays one).

    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth and Su 2022, Corollary 2.13), checked here: at the ε
    returned δ(ε) is δ or a hair above (the ε a hair below the exact one, never above it):

    >>> from scipy.stats import norm
    >>> e = gdp_epsilon(1.0, 1e-6)
    >>> 1e-6 <= float(norm.cdf(-e + 0.5) - math.exp(e) * norm.cdf(-e - 0.5)) < 1.001e-6
    True
    """
    if not 0 < delta < 1:
        raise ValueError(f"Gaussian DP states an ε only at a δ in (0, 1), got δ = {delta!r}")
    if mu <= 0:
        return 0.0
    if not math.isfinite(mu):
        return math.inf
    from dp_accounting.pld import privacy_loss_distribution as pld

    dist = pld.from_gaussian_mechanism(standard_deviation=1.0 / mu, sensitivity=1.0, pessimistic_estimate=False,
                                       use_connect_dots=False, value_discretization_interval=1e-4)
    return float(dist.get_epsilon_for_delta(delta))


def white_box_words(wb: dict | None, full: bool = True) -> str:
    """A white-box bound (:meth:`WhiteBox.as_dict`) in a table cell: ε for Laplace noise; for Gaussian noise μ, with
    (``full``) the declared μ and the ε at δ beside it; a dash where there is none.

    >>> white_box_words({"law": "gaussian", "value": 0.91, "declared": 1.02, "epsilon": 3.1, "delta": 1e-9})
    'μ 0.910 of 1.020 (ε 3.100 at δ 1e-09)'
    >>> white_box_words({"law": "gaussian", "value": 0.91}, full=False), white_box_words(None)
    ('μ 0.910', '–')
    """
    if wb is None:
        return "–"
    if wb["law"] == "laplace":
        return f"{wb['value']:.3f}"
    short = f"μ {wb['value']:.3f}"
    return f"{short} of {wb['declared']:.3f} (ε {wb['epsilon']:.3f} at δ {wb['delta']:g})" if full else short


def best_white_box(boxes) -> WhiteBox | None:
    """The bound of the most spending among ``boxes`` (dicts or :class:`WhiteBox`, None skipped): the largest share
    of what is declared."""
    got = [b if isinstance(b, WhiteBox) else WhiteBox.of(b) for b in boxes]
    got = [b for b in got if b is not None]
    return max(got, key=lambda b: b.ratio, default=None)


def measured_summary(result) -> dict:
    """The measured ε of an audit result (:class:`~censusrecon.synth.audit.statistics.AuditResult`): the black box,
    the white box where the mechanism's noise law lets one be read (else why not), the larger of them as an ε, its
    share of the declared ε (for Gaussian noise, the white box's share of the declared μ), whether that share reaches
    :data:`TIGHT_SHARE`, and the audit's seconds.

    >>> from censusrecon.synth.audit.statistics import AuditResult
    >>> r = AuditResult("m", 2.0, 0.4, 1000, 0.95, "e", {}, {"white_box": laplace_white_box(1.9, 2.0, "t", 9).as_dict()})
    >>> s = measured_summary(r); s["epsilon"], s["share"], s["tight"], s["by"]
    (1.9, 0.95, True, 'white box')
    """
    eps = float(result.declared_epsilon)
    black = float(result.epsilon_lower_bound)
    wb = WhiteBox.of(result.details.get("white_box"))
    out = {"declared_epsilon": eps,
           "black_box": {"epsilon": round(black, 6), "releases": int(result.runs),
                         "confidence": float(result.confidence), "event": result.event}}
    if wb is None:
        out["white_box"] = None
        out["white_box_why_not"] = result.details.get("white_box_why_not",
                                                      "no noise law is declared: only the black box measures it")
        measured, share, by = black, (black / eps if eps > 0 else 0.0), "black box"
    else:
        out["white_box"] = wb.as_dict()
        black_share = black / eps if eps > 0 else 0.0
        if wb.law == "gaussian":  # shares compare like with like: μ with μ, the black box's ε with ε
            share, by = max((wb.ratio, "white box"), (black_share, "black box"))
            measured = max(wb.epsilon, black)
        else:
            measured, by = max((wb.value, "white box"), (black, "black box"))
            share = measured / eps if eps > 0 else 0.0
    out.update(epsilon=round(measured, 6), share=round(share, 4), tight=share >= TIGHT_SHARE, by=by,
               audit_seconds=result.details.get("audit_seconds"))
    return out
