"""Bench: the level of the audit's noise-shape test at the p-values the audit actually reads.

The audit rejects a measurement's noise as not discrete Laplace when the chi-square p-value of its
|noise| falls below a Bonferroni level, 1e-5 to 1e-4 in a TopDown audit (``release.audit.false_alarm``
0.1% over six measurements and six checks). A chi-square p-value is only as good as its far tail:
this bench simulates many shape tests of correct discrete Laplace noise and counts how often each
p-value falls below 1e-2 … 1e-5, against the count a test at its level allows.

It runs the audit's own code (``synth.audit.statistics.shape_bins``, ``laplace_ratio``, ``laplace_abs_tail``,
``binned_chi_square_pvalue``) on draws simulated as counts per |x| (a multinomial over 0, 1, …, so that
10^6 tests of 10^6 draws take about two minutes): the scale is fitted from the draws' mean |x| as the
audit fits it. ``--tail-expected`` sets the fewest draws a bin may expect (the audit's:
``SHAPE_TAIL_EXPECTED``, 50).

    python bench/shape_test_level.py                      # 10^6 tests of 10^6 draws, scale 3
    python bench/shape_test_level.py --scale 30 --seed 13

Measured 2026-12-05 on the 2-core machine, 10^6 tests of 10^6 draws each:

    tests rejected (allowed)   p < 1e-3    p < 1e-4   p < 3e-5   p < 1e-5
    scale 3                    723 (1000)  57 (100)   12 (30)    6 (10)
    scale 30                   759 (1000)  62 (100)   12 (30)    4 (10)

The bins of the audit until that day (the far bin expecting 5 draws, the bins before it fewer than 10,
simulated by the same method): scale 3, 54 below 3e-5 and 25 below 1e-5; scale 30, 66 and 36: correct
noise failed 2 to 3.6 times too often where the audit reads the test (TopDown's CI failure of
2026-12-05: block/detailed at p = 1.5e-5 against a level of 2.8e-5).
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
from scipy.stats import beta
from tqdm import tqdm

from censusrecon.synth.audit import statistics as audit

LEVELS = (1e-2, 1e-3, 1e-4, 3e-5, 1e-5)


def shape_pvalues(draws: int, tests: int, scale: float, seed: int, chunk: int = 5000) -> np.ndarray:
    """The shape test's p-value on ``tests`` independent sets of ``draws`` correct discrete Laplace
    draws of scale ``scale``, each fitted and binned as the audit does."""
    r0 = math.exp(-1 / scale)
    kmax = int(40 * scale) + 2  # P(|X| ≥ 40 scales) ≈ 4e-18: never drawn
    ks = np.arange(kmax)
    pk = np.where(ks == 0, (1 - r0) / (1 + r0), 2 * r0**ks * (1 - r0) / (1 + r0))
    pk[-1] = 0.0
    pk /= pk.sum()
    rng = np.random.default_rng(seed)
    out = []
    with tqdm(total=tests, desc="shape tests", unit="test") as bar:
        while len(out) < tests:
            counts = rng.multinomial(draws, pk, size=min(chunk, tests - len(out)))
            for c in counts:
                r = audit.laplace_ratio(float((c * ks).sum()) / draws)
                edges, probs = audit.shape_bins(draws, audit.laplace_abs_tail(r), kmax)
                at_least = np.append(np.cumsum(c[::-1])[::-1], 0)  # draws with |x| ≥ k
                e = np.minimum(edges, kmax)
                binned = at_least[e] - np.append(at_least[e[1:]], 0)
                out.append(audit.binned_chi_square_pvalue(binned, probs))
            bar.update(len(counts))
    return np.array(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", type=int, default=1_000_000)
    ap.add_argument("--draws", type=int, default=1_000_000)
    ap.add_argument("--scale", type=float, default=3.0)
    ap.add_argument("--tail-expected", type=float, default=None,
                    help=f"the last bin's expected count (the audit's: {audit.SHAPE_TAIL_EXPECTED:g})")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.tail_expected is not None:
        audit.SHAPE_TAIL_EXPECTED = args.tail_expected
    t0 = time.time()
    p = shape_pvalues(args.draws, args.tests, args.scale, args.seed)
    rows = []
    for level in LEVELS:
        k = int((p < level).sum())
        hi = float(beta.ppf(0.975, k + 1, p.size - k))
        rows.append({"level": level, "rejected": k, "allowed": level * p.size, "upper_95": hi * p.size})
        print(f"p < {level:<6g}: {k:>7,} of {p.size:,} correct tests rejected; a test at its level: "
              f"{level * p.size:>9,.1f} (95% upper limit of the rate measured: {hi * p.size:,.1f})")
    print(json.dumps({"draws": args.draws, "tests": int(p.size), "scale": args.scale,
                      "tail_expected": audit.SHAPE_TAIL_EXPECTED, "seconds": round(time.time() - t0, 1),
                      "levels": rows}))


if __name__ == "__main__":
    main()
