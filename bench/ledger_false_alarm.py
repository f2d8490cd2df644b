"""Bench: how often the spending-ledger checks fail an honest synthesizer (their false-alarm rate), measured.

The audit decides SmartNoise's MST and AIM by their spending ledgers (synth/audit/spending.py): the deterministic
spending check, and two statistical ones, ``measurement_noise`` (the measured cells' Σ(noise/σ)², χ² with as
many degrees of freedom as cells when the noise is as declared) and ``selection_law`` (the best-scored picks,
Poisson-binomial over the selections' chances under the exponential mechanism's law). A real fit takes seconds,
so the hundreds of honest audits a rate below 1% needs (299 clean ones at the least) cannot all be real fits.
This bench measures it in two parts, both printed:

1. **Real ledgers.** The ledgers of real honest fits, made exactly as the shipped audit makes them (the config's
   programs with ``spending``, every unit, every audited ε, ``spending.runs`` fits each, with the seeds the audit
   would use under ``--seed``), checked at the confidence the shipped audit runs each check at: every check's
   outcome and p-value. These are real audits of the real library, few.
2. **Their random parts redrawn from the declared laws.** For each of ``--draws`` simulated audits, every
   ledger keeps what the data and the synthesizer's choices fixed (cells measured, selections' chances) and
   has what is random under the declared laws drawn again: each fit's Σ(noise/σ)² from χ²(its cells), each
   fit's best-scored picks as a sum of Bernoulli(its selections' chances). The same check_spending then decides
   each. A simulated audit fails if any ledger check of any program, unit or ε fails: the share that fail is the
   ledger checks' false-alarm rate at the shipped settings, with its 95% Clopper-Pearson interval and one-sided
   upper limit (below 1% is the goal; by design it is at most release.audit.false_alarm times their share of
   the audit's checks). This tests the checks' arithmetic and levels, not whether the library's noise follows
   its declared law: part 1's p-values speak to that.

    python bench/ledger_false_alarm.py                       # the shipped own_release.yaml: 24 ledgers, about 4 min
    python bench/ledger_false_alarm.py --draws 20000 --seed 7

The ledgers of part 1 are kept (``--ledgers``, .npz) and reused by a rerun with the same arguments and code.
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import time
from pathlib import Path

import numpy as np
from scipy.stats import beta
from tqdm import tqdm

from censusrecon.experiments.config import load_config
from censusrecon.experiments.problem import load_population, resolve
from censusrecon.experiments.release.audit import StudySource
from censusrecon.synth.audit import spending
from censusrecon.synth.audit.jobs import audit_level, unit_roles
from censusrecon.synth.audit.program_audit import _program_instance, program_seed
from censusrecon.synth.audit.source import AuditSpec
from censusrecon.synth.audit.spending import LEDGER, WIDTH, check_spending
from censusrecon.synth.audit.statistics import opendp_rho
from censusrecon.synth.program_host import run_program

ROOT = Path(__file__).resolve().parents[1]
#: the files whose code makes or decides a ledger (the ledgers' file name carries their hash)
LEDGER_CODE = ("synth/audit/spending.py", "synth/adapters/smartnoise_synth.py", "synth/adapters/contract.py",
               "synth/program_host.py")


def real_ledgers(cfg, study, units: list[str], seed: int) -> list[dict]:
    """Every ledger the audit of ``cfg`` (resolved: ``study``) on ``units`` under ``seed`` checks: (program, unit,
    ε) → its rows."""
    cache: dict = {}
    jobs = [(spec, u, eps) for spec in cfg.release.programs if spec.spending is not None
            for eps in cfg.release.audited_epsilons() for u in units]
    out = []
    for spec, unit, eps in tqdm(jobs, desc="real ledgers", unit="ledger"):
        _, inputs, _ = _program_instance(StudySource(study), unit, True, cache)
        stage = spec.model_copy(update={"params": {**spec.params, **spec.spending.params}})
        rows = run_program(cfg, stage, inputs, eps, spec.spending.runs,
                           program_seed(seed, unit, True, eps, "spending"), width=WIDTH)
        out.append({"program": spec.name, "unit": unit, "epsilon": eps, "delta": spec.spending.delta, "rows": rows})
    return out


def redraw(rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The ledger with its random parts drawn again under the declared laws (see the module's text)."""
    out = rows.copy()
    cells = rows[:, LEDGER.index("noise_cells")]
    out[:, LEDGER.index("noise_ss")] = [rng.chisquare(c) if c > 0 else 0.0 for c in cells]
    chances = rows[:, len(LEDGER):]
    out[:, LEDGER.index("argmax_hits")] = (rng.random(chances.shape) < chances).sum(axis=1)
    return out


def _cached_sf():
    """poisson_binomial_sf with each ledger's law computed once (its chances do not change between draws)."""
    pmfs: dict = {}
    plain = spending.poisson_binomial_sf

    def sf(chances, k):
        key = hashlib.sha1(np.ascontiguousarray(chances, dtype=np.float64).tobytes()).hexdigest()
        if key not in pmfs:
            pmfs[key] = np.array([plain(chances, j) for j in range(len(chances) + 2)])
        table = pmfs[key]
        return float(table[min(max(k, 0), len(table) - 1)])
    return sf, plain


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/agency/own_release.yaml")
    ap.add_argument("--set", action="append", default=[], help="config overrides")
    ap.add_argument("--seed", type=int, default=5, help="the audit seed the real ledgers are made under")
    ap.add_argument("--draws", type=int, default=5000, help="simulated audits (redrawn ledgers)")
    ap.add_argument("--ledgers", default=None, help=".npz of the real ledgers (default under results/bench/)")
    ap.add_argument("--level", type=float, default=None, help="each check's confidence instead of the shipped "
                    "audit's (e.g. 0.99: each check of each ledger should then fail at most 1%% of the time, the "
                    "calibration seen at a rate one can count)")
    args = ap.parse_args()
    cfg = load_config(args.config, list(args.set))
    study = resolve(cfg, load_population(cfg))
    units = list(unit_roles(StudySource(study), study.units, args.seed))
    level = args.level or audit_level(AuditSpec.of(cfg), len(units)).audit.confidence
    code = hashlib.sha256(b"".join((ROOT / f).read_bytes() for f in LEDGER_CODE)).hexdigest()[:10]
    sets = hashlib.sha256("|".join(args.set).encode()).hexdigest()[:6] if args.set else "default"
    path = Path(args.ledgers or f"results/bench/ledgers_{cfg.name}_{args.seed}_{sets}_{code}.npz")
    t0 = time.perf_counter()
    if path.exists():
        with np.load(path, allow_pickle=True) as z:
            ledgers = list(z["ledgers"])
    else:
        ledgers = real_ledgers(cfg, study, units, args.seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, ledgers=np.array(ledgers, dtype=object))
    real_seconds = time.perf_counter() - t0
    allowed = functools.lru_cache(opendp_rho)  # OpenDP's conversion: the same (ε, δ) every draw
    real = []
    for g in ledgers:
        checks, info = check_spending(g["rows"], g["epsilon"], g["delta"], level, allowed)
        real.append({"program": g["program"], "unit": g["unit"], "epsilon": g["epsilon"], "fits": len(g["rows"]),
                     "checks": checks, "noise_p_value": info["noise_p_value"],
                     "selection_p_value": info["selection_p_value"]})
    sf, plain = _cached_sf()
    spending.poisson_binomial_sf = sf
    rng = np.random.default_rng(args.seed)
    failed, by_check, per_ledger = 0, {}, {}
    try:
        for _ in tqdm(range(args.draws), desc="redrawn audits", unit="audit"):
            bad = set()
            for g in ledgers:
                checks, _ = check_spending(redraw(g["rows"], rng), g["epsilon"], g["delta"], level, allowed)
                here = {k for k, v in checks.items() if v.startswith("fail")}
                for k in here:
                    per_ledger[k] = per_ledger.get(k, 0) + 1
                bad |= here
            failed += bool(bad)
            for k in bad:
                by_check[k] = by_check.get(k, 0) + 1
    finally:
        spending.poisson_binomial_sf = plain
    n = args.draws
    lo = 0.0 if failed == 0 else float(beta.ppf(0.025, failed, n - failed + 1))
    hi = 1.0 if failed == n else float(beta.ppf(0.975, failed + 1, n - failed))
    upper = 1.0 if failed == n else float(beta.ppf(0.95, failed + 1, n - failed))
    real_failed = [r for r in real if any(v.startswith("fail") for v in r["checks"].values())]
    out = {"config": args.config, "set": args.set, "seed": args.seed, "per_check_confidence": level,
           "real_ledgers": len(real), "real_fits": int(sum(r["fits"] for r in real)),
           "real_failed": len(real_failed), "real_seconds": round(real_seconds, 1),
           "real_min_noise_p": min(r["noise_p_value"] for r in real),
           "real_min_selection_p": min(r["selection_p_value"] for r in real),
           "real": real, "draws": n, "failed": failed, "rate": failed / n, "ci95": [round(lo, 5), round(hi, 5)],
           "upper95_one_sided": round(upper, 5), "met": upper < 0.01, "failed_by_check": by_check,
           "ledger_checks_failed_share": {k: round(v / (n * len(ledgers)), 6) for k, v in per_ledger.items()},
           "ledger_check_level": round(1 - level, 8),
           "ledgers_file": str(path), "seconds": round(time.perf_counter() - t0, 1)}
    print(f"real ledgers: {len(real_failed)} of {len(real)} failed a check at confidence {level:.6g} "
          f"(least p: noise {out['real_min_noise_p']:.3g}, selection {out['real_min_selection_p']:.3g})")
    print(f"redrawn: {failed} of {n} simulated audits' ledger checks failed: {100 * failed / n:.3f}% (95% interval "
          f"{100 * lo:.3f}% to {100 * hi:.3f}%; one-sided upper 95% limit {100 * upper:.3f}%, "
          f"{'below' if upper < 0.01 else 'not below'} 1%)")
    for k, v in out["ledger_checks_failed_share"].items():
        print(f"  {k}: failed on {100 * v:.3f}% of the {n * len(ledgers):,} redrawn ledgers (its level: "
              f"{100 * (1 - level):.4g}%)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
