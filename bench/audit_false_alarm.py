"""Bench: how often the audit fails a correct mechanism (its false-alarm rate), measured.

Audits the unmodified Laplace tables of ``configs/release_tiny.yaml`` (one tract, the ε grid of the
config) again and again, each time with fresh noise (another seed), and prints the share of audits
that failed with its 95% Clopper-Pearson interval; the target is at most 1% (``release.audit.
false_alarm``). The last line is one JSON object.

    python bench/audit_false_alarm.py                  # 300 audits, about 10 minutes on 2 CPU cores
    python bench/audit_false_alarm.py --audits 50      # a quicker, wider interval
"""

from __future__ import annotations

import argparse
import json
import time

from scipy.stats import beta

from experiments.config import load_config
from experiments.problem import load_population
from experiments.release.audit import audit_release


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--audits", type=int, default=300)
    ap.add_argument("--runs", type=int, default=20_000, help="release.audit.runs of each audit")
    ap.add_argument("--mechanisms", default="laplace_tables")
    args = ap.parse_args()
    base = load_config("configs/release_tiny.yaml", ["target.units=1", f"release.audit.runs={args.runs}",
                                                     f"release.mechanisms=[{args.mechanisms}]"])
    pop = load_population(base)
    failed, reasons, t0 = 0, {}, time.perf_counter()
    for seed in range(args.audits):
        cfg = base.model_copy(update={"seed": 1000 + seed})
        bad = [r for r in audit_release(cfg, pop) if not r.passed]
        failed += bool(bad)
        for r in bad:
            for k in list(r.failed_checks()) or ["bound"]:
                reasons[k] = reasons.get(k, 0) + 1
    n = args.audits
    lo = 0.0 if failed == 0 else float(beta.ppf(0.025, failed, n - failed + 1))
    hi = 1.0 if failed == n else float(beta.ppf(0.975, failed + 1, n - failed))
    out = {"audits": n, "failed": failed, "rate": failed / n, "ci95": [round(lo, 4), round(hi, 4)],
           "target": base.release.audit.false_alarm, "reasons": reasons, "runs_per_audit": args.runs,
           "epsilons": base.release.epsilons, "mechanisms": args.mechanisms,
           "seconds": round(time.perf_counter() - t0, 1)}
    print(f"{failed} of {n} audits of correct mechanisms failed: {100 * failed / n:.2f}% "
          f"(95% interval {100 * lo:.2f}% to {100 * hi:.2f}%; target at most {100 * out['target']:g}%)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
