"""Bench: how often the audit fails a correct mechanism (its false-alarm rate), measured.

Audits the unmodified mechanisms of ``configs/release_tiny.yaml`` (one tract, the ε grid of the
config) again and again, each time with fresh noise (another seed), and prints the share of audits
that failed with its 95% Clopper-Pearson interval and its one-sided upper 95% limit, which must be
below 1% (``release.audit.false_alarm`` sets the design rate, 0.1%): 299 clean audits of 299 are the
fewest whose limit is below 1%; 500 audits allow one failure.

Each audit's outcome is appended to ``--log`` (one JSON line per seed) as soon as it is known, so a
killed run resumes where it stopped when started again with the same arguments and the same audit
code (the log's name carries a hash of it); a progress bar shows audits done and failures so far.
``--jobs 2`` runs two audits at once. The last line printed is one JSON object.

    python bench/audit_false_alarm.py --audits 500 --jobs 2   # Laplace tables: about 17 minutes on 2 CPU cores
    python bench/audit_false_alarm.py --audits 50      # a quicker, wider interval
    python bench/audit_false_alarm.py --audits 500 --mechanisms smoothed_histogram
    python bench/audit_false_alarm.py --audits 200 --jobs 2 --mechanisms perturbed_histogram
    # an honest release program (OpenDP's adapter, in batches and one release per call), audited on the
    # example's 4 units chosen to cover the size range, every check of the black-box audit:
    python bench/audit_false_alarm.py --audits 300 --jobs 2 --mechanisms "" --runs 1000 \
        --config configs/agency/own_release.yaml --set target.units=all --set "release.epsilons=[0.5, 8.0]" \
        --set "release.files=[]" --set "release.programs=[{name: opendp, function: \
        'censusrecon.synth.adapters.opendp_tables:release', noise: laplace, audit_runs: 500, calls: batch, single_runs: 20}]"
    # TopDown on release_tiny's county tree (its exact replay, free of statistical error, cut short):
    python bench/audit_false_alarm.py --audits 200 --jobs 2 --mechanisms topdown --runs 10000 \
        --set "target.with_block=[true]" --set release.topdown.root=county \
        --set "queries={kind: tables, tables: [P1, P12]}" --set release.audit.replay_pairs=2 \
        --set release.audit.replay_draws=1 [--set release.topdown.accounting=zcdp]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from scipy.stats import beta
from tqdm import tqdm

from censusrecon.experiments.config import load_config
from censusrecon.experiments.problem import resolve
from censusrecon.experiments.release.audit import audit_release


def clopper_pearson(failed: int, n: int) -> tuple[float, float]:
    """Two-sided 95% Clopper-Pearson interval for ``failed`` of ``n``."""
    lo = 0.0 if failed == 0 else float(beta.ppf(0.025, failed, n - failed + 1))
    hi = 1.0 if failed == n else float(beta.ppf(0.975, failed + 1, n - failed))
    return lo, hi


#: the files whose code decides an audit's outcome (patterns; the log's name carries their hash)
AUDIT_CODE = ("synth/audit/*.py", "synth/keyed.py", "experiments/release/audit.py", "synth/release_path.py",
              "synth/publishing.py", "synth/registry.py", "experiments/release/program.py", "synth/adapters/opendp_tables.py", "synth/adapters/contract.py")
_WORKER: dict = {}


def one_sided_upper(failed: int, n: int) -> float:
    """The one-sided upper 95% limit of the rate behind ``failed`` of ``n``."""
    return 1.0 if failed == n else float(beta.ppf(0.95, failed + 1, n - failed))


def _init_worker(base) -> None:
    _WORKER["study"] = resolve(base)


def _audit_one(seed: int) -> dict:
    results = audit_release(_WORKER["study"], seed=seed)
    bad = [r for r in results if r.outcome == "failed"]
    reasons = sorted({k for r in bad for k in (list(r.failed_checks()) or ["bound"])})
    by = {r.mechanism: sorted(r.failed_checks()) or ["bound"] for r in bad}  # each kind's own false alarms
    return {"seed": seed, "failed": bool(bad), "reasons": reasons, "failed_by": by,
            "audited": sorted({r.mechanism for r in results}),
            "inconclusive": sorted({k for r in results if r.outcome == "inconclusive" for k in r.unchecked()})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--audits", type=int, default=400)
    ap.add_argument("--runs", type=int, default=20_000, help="release.audit.runs of each audit")
    ap.add_argument("--mechanisms", default="laplace_tables")
    ap.add_argument("--config", default="configs/release_tiny.yaml")
    ap.add_argument("--set", action="append", default=[], help="config overrides (e.g. release.topdown.accounting=zcdp)")
    ap.add_argument("--log", default=None, help="JSON-lines log of each audit (default under results/bench/)")
    ap.add_argument("--jobs", type=int, default=1, help="audits run at once, one process each (default 1)")
    args = ap.parse_args()
    base = load_config(args.config, ["target.units=1", f"release.audit.runs={args.runs}",
                                     f"release.mechanisms=[{args.mechanisms}]"] + list(args.set))
    # the log is per version of the audit's code: a resumed run never mixes audits of two versions
    import hashlib

    root = Path(__file__).resolve().parents[1]
    code = hashlib.sha256(b"".join(p.read_bytes() for f in AUDIT_CODE for p in sorted(root.glob(f)))).hexdigest()[:10]
    sets = hashlib.sha256("|".join(args.set).encode()).hexdigest()[:6] if args.set else "default"
    log = Path(args.log or f"results/bench/audit_false_alarm_{base.name}_{args.mechanisms.replace(',', '+')}"
                           f"_{args.runs}_{sets}_{code}.jsonl")
    log.parent.mkdir(parents=True, exist_ok=True)
    done: dict[int, dict] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                done[rec["seed"]] = rec
    t0 = time.perf_counter()
    seeds = [1000 + i for i in range(args.audits)]
    todo = [s for s in seeds if s not in done]
    bar = tqdm(seeds, desc="audits", unit="audit", initial=len(seeds) - len(todo))
    with log.open("a") as fh:
        if args.jobs > 1:
            import multiprocessing as mp

            pool = mp.get_context("spawn").Pool(args.jobs, _init_worker, (base,))
            results = pool.imap_unordered(_audit_one, todo)
        else:
            _init_worker(base)
            results = map(_audit_one, todo)
        for rec in results:  # each outcome is logged as soon as it is known
            done[rec["seed"]] = rec
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            bar.update(1)
            bar.set_postfix(failed=sum(done[s]["failed"] for s in seeds if s in done))
        if args.jobs > 1:
            pool.close()
            pool.join()
    bar.close()
    recs = [done[s] for s in seeds]
    n, failed = len(recs), sum(r["failed"] for r in recs)
    inconclusive = sum(bool(r.get("inconclusive")) for r in recs)  # not a false alarm: a check that could not run
    reasons: dict[str, int] = {}
    for r in recs:
        for k in r["reasons"]:
            reasons[k] = reasons.get(k, 0) + 1
    kinds = sorted({m for r in recs for m in r.get("audited", [])})
    by_kind = {}
    for m in kinds:  # each kind audited in every one of the audits: its own rate and limit
        k = sum(m in r.get("failed_by", {}) for r in recs)
        by_kind[m] = {"failed": k, "upper95_one_sided": round(one_sided_upper(k, n), 4)}
    lo, hi = clopper_pearson(failed, n)
    upper = one_sided_upper(failed, n)
    out = {"audits": n, "failed": failed, "rate": failed / n, "ci95": [round(lo, 4), round(hi, 4)],
           "upper95_one_sided": round(upper, 4), "met": upper < 0.01, "inconclusive": inconclusive,
           "target": base.release.audit.false_alarm, "reasons": reasons, "by_kind": by_kind, "runs_per_audit": args.runs,
           "epsilons": base.release.epsilons, "mechanisms": args.mechanisms, "config": args.config, "set": args.set,
           "log": str(log), "seconds_this_run": round(time.perf_counter() - t0, 1)}
    print(f"{failed} of {n} audits of correct mechanisms failed: {100 * failed / n:.2f}% "
          f"(95% interval {100 * lo:.2f}% to {100 * hi:.2f}%; one-sided upper 95% limit {100 * upper:.2f}%, "
          f"{'below' if upper < 0.01 else 'not below'} 1%)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
