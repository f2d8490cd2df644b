"""The `censusrecon` command line: run an experiment config, replot a run."""

from __future__ import annotations

import argparse
import logging
import sys

from microdata.errors import CensusReconError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="censusrecon",
        description="Reconstruct census microdata from published statistics (RAP-Rank) and compare with baselines.",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run an experiment config; writes results/<name>/<config-hash>/")
    r.add_argument("config", help="YAML experiment config (see configs/)")
    r.add_argument("--out", default="results", help="results root directory (default: results)")
    r.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set attack.runs=10 (repeatable)")
    r.add_argument("--no-progress", action="store_true", help="hide progress bars")
    pl = sub.add_parser("plot", help="regenerate match_rate.png/.pdf of a run from its Parquet")
    pl.add_argument("run_dir")
    ev = sub.add_parser("evaluate-release",
                        help="release at each ε, attack each release, compare with exact tables and baselines, report")
    ev.add_argument("config")
    ev.add_argument("--out", default="results")
    ev.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ev.add_argument("--no-progress", action="store_true")
    au = sub.add_parser("audit", help="audited ε lower bound of every mechanism of a config, next to its declared ε")
    au.add_argument("config")
    au.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    au.add_argument("--json", action="store_true", help="one JSON object per mechanism")
    qs = sub.add_parser("queries", help="what a config publishes, per target unit, without running any attack")
    qs.add_argument("config")
    qs.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    qs.add_argument("--json", action="store_true", help="one JSON line per unit")
    sw = sub.add_parser("sweep", help="fan (unit × method × seed) tasks out locally or over Ray; resumable")
    sw.add_argument("config")
    sw.add_argument("--backend", choices=["local", "ray"], default="local")
    sw.add_argument("--address", default=None, help="Ray cluster address (default: start a local one)")
    sw.add_argument("--out", default="results")
    sw.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    sw.add_argument("--no-progress", action="store_true")
    rp = sub.add_parser("report", help="write report.md for a finished run directory")
    rp.add_argument("run_dir")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from reconstruct.rap import use_cpu_cores_as_devices

    use_cpu_cores_as_devices()  # before any JAX computation: every core runs RAP runs at once
    try:
        if args.command == "run":
            from experiments.config import load_config
            from experiments.runner import run_experiment

            cfg = load_config(args.config, args.overrides)
            run_dir = run_experiment(cfg, args.out, progress=not args.no_progress)
            print(f"results: {run_dir}")
            print(f"  {run_dir / 'match_rate.parquet'}")
            print(f"  {run_dir / 'match_rate.png'}")
            _print_summary(run_dir)
        elif args.command == "evaluate-release":
            from experiments.config import load_config
            from experiments.release import evaluate_release

            run_dir = evaluate_release(load_config(args.config, args.overrides), args.out,
                                       progress=not args.no_progress)
            print(f"results: {run_dir}")
            print(f"  report: {run_dir / 'report.md'}")
        elif args.command == "sweep":
            import json

            from experiments.config import load_config
            from experiments.sweep import sweep

            summary = sweep(load_config(args.config, args.overrides), args.out, args.backend, args.address,
                            progress=not args.no_progress)
            print(json.dumps(summary))
        elif args.command == "queries":
            _queries(args)
        elif args.command == "report":
            from experiments.report import write_run_report

            print(write_run_report(args.run_dir))
        elif args.command == "audit":
            _audit(args)
        elif args.command == "plot":
            from experiments.runner import replot

            for path in replot(args.run_dir):
                print(path)
    except CensusReconError as e:
        print(f"censusrecon: error: {e}", file=sys.stderr)
        return 2
    return 0


def _queries(args) -> None:
    import json

    from experiments.config import load_config
    from experiments.runner import unit_queries

    cfg = load_config(args.config, args.overrides)
    for row in unit_queries(cfg):
        if args.json:
            print(json.dumps(row))
        else:
            tables = ", ".join(f"{k} {v}" for k, v in row["cells_per_table"].items())
            blocks = (f"{row['num_blocks']} blocks ({row['occupied_blocks']} occupied), " if row["num_blocks"] else "")
            print(f"{row['unit']}: {blocks}{row['num_queries']} distinct queries ({tables})")


def _audit(args) -> None:
    import json

    from experiments.config import ConfigError, load_config
    from experiments.release_audit import audit_release

    cfg = load_config(args.config, args.overrides)
    if cfg.release is None:
        raise ConfigError(f"{args.config} has no 'release' section: nothing to audit")
    results = audit_release(cfg, progress=not args.json and sys.stderr.isatty())
    if args.json:
        for r in results:
            print(json.dumps(r.as_dict()))
    else:
        print(f"{'mechanism':<22}{'declared ε':>12}{'audited ε ≥':>14}   {'runs':>7}   checks")
        for r in results:
            flag = "" if r.epsilon_lower_bound <= r.declared_epsilon else "   EXCEEDS THE DECLARED ε"
            failed = [f"{k}: {v}" for k, v in r.checks.items() if v != "pass" and not v.startswith(("declared", "not run"))]
            print(f"{r.mechanism:<22}{r.declared_epsilon:>12g}{r.epsilon_lower_bound:>14.3f}   {r.runs:>7}   "
                  + ("all pass" if not failed else "FAILED " + "; ".join(failed)) + flag)
    if not all(r.passed for r in results):
        raise ConfigError("the audit failed: a mechanism's audited ε exceeds its declared ε or a check failed "
                          "(see above); do not publish with it")


def _print_summary(run_dir) -> None:
    import pandas as pd

    from experiments.metrics import average_curves, persons_reconstructed, summarise_persons, variant_label

    df = pd.read_parquet(run_dir / "match_rate.parquet")
    curves = average_curves(df, 10, by=["variant", "method"])
    persons = summarise_persons(persons_reconstructed(df)).set_index(["variant", "method"])
    variants = list(dict.fromkeys(df["variant"].tolist()))
    for v in variants:
        table = curves[(curves["variant"] == v) & curves["k_over_u"].round(2).isin([0.1, 0.5, 1.0])].pivot_table(
            index="method", columns="k_over_u", values="match_rate", sort=False)
        table.columns = [f"k/u={c:g}" for c in table.columns]
        print(f"\nmean match rate across units, {variant_label(v, variants)}:")
        print(table.round(3).to_string())
        for m in table.index:
            if (v, m) in persons.index:
                p = persons.loc[(v, m)]
                print(f"  {m}: {int(p['persons'])} persons reconstructed (unique in D, top u), "
                      f"best baselines {int(p['baseline_persons'])}; difference per unit "
                      f"{p['difference_mean']:+.1f} ± {p['difference_sem']:.1f}")


if __name__ == "__main__":
    sys.exit(main())
