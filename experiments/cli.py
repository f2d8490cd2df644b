"""The `censusrecon` command line: run, sweep, evaluate and audit releases, plot, report, example data."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from censusrecon.microdata.errors import CensusReconError


from censusrecon.experiments.exits import (EXIT_AUDIT_FAILED, EXIT_BAD_INPUT, EXIT_DO_NOT_PUBLISH,  # noqa: F401
                                          EXIT_ERROR, EXIT_INTERRUPTED, EXIT_STATUSES, EXIT_UNDECIDED)

_CONFIG_HELP = "a YAML experiment config (see configs/; every file there says which command runs it)"
_SET_HELP = ("override a config key with a YAML value, e.g. --set attack.runs=10 or --set 'target.with_block=[true]' "
             "(repeatable; any change gives a new config hash, hence a new results directory)")
_OUT_HELP = "root of the results directories (default: results); a run writes OUT/<name>/<config-hash>/"
_PROGRESS_HELP = "no progress bars or per-unit lines"
_RESULTS_HELP = ("a results directory (OUT/<name>/<config-hash>/ or its release/ subdirectory), or the config that "
                 "wrote it")
_RESULTS_OUT_HELP = "where a config's results were written (default: results)"
_RESULTS_SET_HELP = "with a config: the --set overrides its run was given (they make its config hash)"


def _add_config(p: argparse.ArgumentParser, out: bool = True, progress: bool = True) -> None:
    p.add_argument("config", help=_CONFIG_HELP)
    if out:
        p.add_argument("--out", default="results", metavar="DIR", help=_OUT_HELP)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=_SET_HELP)
    if progress:
        p.add_argument("--no-progress", action="store_true", help=_PROGRESS_HELP)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="censusrecon",
        description="If we publish these tables, how many people's records can be reconstructed from them, beyond "
                    "what anyone could guess, and does a DP release fix that? Reconstructs census microdata from "
                    "published statistics (RAP-Rank), compares with baselines that never saw them, and evaluates "
                    "and audits differentially private releases.",
        epilog="Run 'censusrecon COMMAND --help' for a command's arguments. " + EXIT_STATUSES)
    p.add_argument("-v", "--verbose", action="store_true", help="log progress details and show tracebacks")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _run_command(sub)
    _plot_command(sub)
    _evaluate_release_command(sub)
    _audit_command(sub)
    _queries_command(sub)
    _sweep_command(sub)
    _report_command(sub)
    _describe_population_command(sub)
    _example_data_command(sub)
    _release_template_command(sub)
    return p


def _run_command(sub) -> None:
    """`censusrecon run`'s arguments."""
    _add_config(sub.add_parser(
        "run", help="attack a config's target units; writes OUT/<name>/<config-hash>/",
        description="Attack every target unit of a config with RAP-Rank and its baselines, write match rates, "
                    "persons reconstructed, lift, calibration and plots. Each finished unit is saved at once; "
                    "rerunning the same command resumes where an interrupted run stopped."))


def _plot_command(sub) -> None:
    """`censusrecon plot`'s arguments."""
    pl = sub.add_parser("plot", help="regenerate a run's or a release evaluation's plots from its files",
                        description="Redraw the plots of a finished run directory (censusrecon run) or release "
                                    "directory (censusrecon evaluate-release) from its Parquet files.")
    pl.add_argument("run_dir", help=_RESULTS_HELP)
    pl.add_argument("--out", default="results", metavar="DIR", help=_RESULTS_OUT_HELP)
    pl.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=_RESULTS_SET_HELP)


def _evaluate_release_command(sub) -> None:
    """`censusrecon evaluate-release`'s arguments."""
    ev = sub.add_parser(
        "evaluate-release", help="release at each ε, attack each release, compare, audit, decide, report",
        description="For each ε and mechanism of the config's release section, release each unit's tables, attack "
                    "the release, compare with the attack on the exact tables and with the baselines, audit the "
                    "publishing code, decide (PUBLISH / DO NOT PUBLISH / CANNOT DECIDE per mechanism: decision.json) "
                    "and write report.md/.html in OUT/<name>/<config-hash>/release/. A finished evaluation of the "
                    "same code, config and inputs is not run again: its decision is printed and no file changes.")
    _add_config(ev)
    ev.add_argument("--reaudit", action="store_true",
                    help="audit a finished evaluation again (its earlier report, audit and decision are kept under "
                         "earlier/)")
    ev.add_argument("--backend", choices=["local", "ray"], default=None,
                    help="local: one process; ray: each unit, and each (BLOCK variant, ε, mechanism) of the audit, a "
                         "task on a Ray cluster (pip install 'censusrecon[ray]'); either resumes after a kill, "
                         "evaluating only the units not done (default: the units here, the audit where "
                         "release.audit.backend says)")
    ev.add_argument("--address", default=None, help="address of a running Ray cluster (default: start a local one "
                    "with sweep.num_cpus CPUs)")


def _audit_command(sub) -> None:
    """`censusrecon audit`'s arguments."""
    au = sub.add_parser("audit", help="audit the publishing code of every mechanism at the config's ε values",
                        description="Release neighbours of every released unit's own data through the calls that "
                                    "publish, many times, and certify a lower bound on each mechanism's ε at every ε "
                                    "of the config, with named checks over whole releases (scale per node, table and "
                                    "band of counts, shape, tail, independence, OpenDP's accounting, replay over many "
                                    "pairs); exits with status 4 if any bound exceeds its ε or a check fails. The "
                                    "audit's seed is fresh unless given, and printed.")
    _add_config(au, out=False)
    au.add_argument("--seed", type=int, default=None, help="the audit's noise key (default: release.audit.seed, else "
                    "fresh); a re-run under another seed is another audit, never a replacement for a failed one")
    au.add_argument("--json", action="store_true", help="print one JSON object per (mechanism, ε) instead of a table")
    au.add_argument("--backend", choices=["local", "ray"], default=None,
                    help="local: one process; ray: each (BLOCK variant, ε, mechanism or program) a task on a Ray "
                         "cluster (pip install 'censusrecon[ray]'); the same results (default: release.audit.backend, "
                         "else local)")
    au.add_argument("--address", default=None, help="address of a running Ray cluster (default: start a local one "
                    "with sweep.num_cpus CPUs)")


def _queries_command(sub) -> None:
    """`censusrecon queries`'s arguments."""
    qs = sub.add_parser("queries", help="what a config publishes, per target unit, without attacking",
                        description="Print, per target unit, its blocks, distinct queries and cells per table.")
    _add_config(qs, out=False, progress=False)
    qs.add_argument("--json", action="store_true", help="print one JSON object per unit instead of a line of text")


def _sweep_command(sub) -> None:
    """`censusrecon sweep`'s arguments."""
    sw = sub.add_parser("sweep", help="fan (unit × method × seed) tasks out locally or over Ray; resumable",
                        description="Run every (unit, method, seed) task of a config as its own task, locally or on "
                                    "a Ray cluster; every task's result is written atomically, so a sweep killed at "
                                    "any moment loses no finished task and a rerun skips them.")
    _add_config(sw)
    sw.add_argument("--backend", choices=["local", "ray"], default="local",
                    help="local: one process; ray: a Ray cluster (pip install 'censusrecon[ray]')")
    sw.add_argument("--address", default=None, help="address of a running Ray cluster (default: start a local one)")


def _report_command(sub) -> None:
    """`censusrecon report`'s arguments."""
    rp = sub.add_parser("report", help="write report.md and report.html for a finished run or release evaluation",
                        description="Write report.md and a self-contained report.html (figures embedded) for a run "
                                    "directory or a release directory.")
    rp.add_argument("run_dir", nargs="+", help=_RESULTS_HELP + "; several exact sweeps of one config (other seeds): "
                    "seeds_report.md beside them, their Bureau tables side by side with the spread")
    rp.add_argument("--out", default="results", metavar="DIR", help=_RESULTS_OUT_HELP)
    rp.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=_RESULTS_SET_HELP)


def _describe_population_command(sub) -> None:
    """`censusrecon describe-population`'s arguments."""
    dp = sub.add_parser("describe-population",
                        help="the population's statistics that attacks are sensitive to, beside 2010's",
                        description="Measure the config's whole population (every unit, not only the targets) on "
                                    "the statistics reconstruction and reidentification depend on: block sizes in "
                                    "the Census Bureau's seven bins, persons and occupied blocks per tract, empty "
                                    "blocks, modal race x ethnicity share and mean sum p^2 (126 cells) and "
                                    "uniqueness on {block, sex, 38-bin age} by block size, national sex, age and "
                                    "race x ethnicity. Each is printed beside its 2010 Census figure, with the "
                                    "tolerance data.population.shape '2010' is held to. Exits with status 2 if any "
                                    "statistic is outside its tolerance and --check is given.")
    _add_config(dp, out=False, progress=False)
    dp.add_argument("--json", action="store_true", help="print one JSON object per statistic instead of a table")
    dp.add_argument("--plot", metavar="PATH", default=None,
                    help="also draw the by-block-size statistics beside 2010's (PATH.png and PATH.pdf)")
    dp.add_argument("--check", action="store_true", help="exit with status 2 if a statistic is outside its tolerance")


def _example_data_command(sub) -> None:
    """`censusrecon example-data`'s arguments."""
    ex = sub.add_parser("example-data", help="write the worked example's person file, block list and own release",
                        description="Write persons.csv and blocks.csv, generated from the embedded population with "
                                    "an agency's own column names and codes, for configs/agency/example.yaml; and "
                                    "agency_tables.csv, the example agency's own noisy tables (made by its own "
                                    "pandas pipeline, discrete Laplace at ε = 1), for configs/agency/own_release.yaml.")
    ex.add_argument("out_dir", nargs="?", default="inputs/agency", help="where to write them (default: inputs/agency)")
    ex.add_argument("--seed", type=int, default=0, help="population seed (default: 0)")
    ex.add_argument("--force", action="store_true", help="replace persons.csv, blocks.csv and agency_tables.csv if they "
                    "exist (without it, an existing file stops the command and nothing is written)")


def _release_template_command(sub) -> None:
    """`censusrecon release-template`'s arguments."""
    tp = sub.add_parser("release-template", help="write the table layout a release file made elsewhere must have",
                        description="Write every row a tables release file (release.files, kind: tables) of the "
                                    "config must have: unit, table, cell, label, geography, value (empty), for "
                                    "its units and declared tables. Fill value with your pipeline's published "
                                    "counts, keep the rest, and name the file under release.files.")
    _add_config(tp, out=False, progress=False)
    tp.add_argument("--to", default="release_template.csv", metavar="PATH",
                    help="the file to write, CSV or Parquet by extension (default: release_template.csv)")
    tp.add_argument("--force", action="store_true", help="replace PATH if it exists")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from censusrecon.reconstruct.compile_cache import use_compilation_cache
    from censusrecon.reconstruct.rap import use_cpu_cores_as_devices

    use_cpu_cores_as_devices()  # before any JAX computation: every core runs RAP runs at once
    use_compilation_cache()  # and compiled programs kept for the next run (CENSUSRECON_JAX_CACHE=off: not)
    try:
        if getattr(args, "out", None) is not None and args.command in ("run", "evaluate-release", "sweep"):
            _check_out(args.out)
        return COMMANDS[args.command](args) or 0
    except CensusReconError as e:
        print(f"censusrecon: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as e:
        note = str(e) or "interrupted; whatever finished was saved: rerun the same command to resume"
        print(f"censusrecon: {note}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as e:  # a file we could not read or write: the system's reason, one line
        if args.verbose:
            raise
        where = f" {e.filename}" if e.filename else ""
        print(f"censusrecon: error: cannot use{where}: {e.strerror or e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as e:  # noqa: BLE001 - one line, never a traceback, unless asked for
        if args.verbose:
            raise
        print(f"censusrecon: error: unexpected {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''} "
              "(run with -v for the traceback, and please report it)", file=sys.stderr)
        return EXIT_ERROR


def _run(args) -> None:
    from censusrecon.experiments.config import load_config
    from censusrecon.experiments.results import nothing_half_made
    from censusrecon.experiments.runner import run_experiment

    cfg = load_config(args.config, args.overrides)
    with nothing_half_made(Path(args.out) / cfg.name / cfg.digest()):
        run_dir = run_experiment(cfg, args.out, progress=not args.no_progress)
    print(f"results: {run_dir}")
    print(f"  {run_dir / 'match_rate.parquet'}")
    print(f"  {run_dir / 'match_rate.png'}")
    _print_summary(run_dir)


def _evaluate_release(args) -> int:
    from censusrecon.experiments.config import load_config
    from censusrecon.experiments.release.evaluate import evaluate_release, release_dir
    from censusrecon.experiments.results import nothing_half_made

    cfg = load_config(args.config, args.overrides)
    with nothing_half_made(release_dir(args.out, cfg)):
        run_dir = evaluate_release(cfg, args.out, progress=not args.no_progress, reaudit=args.reaudit,
                                   backend=args.backend, address=args.address)
    return _print_release_summary(run_dir, cfg)


def _sweep(args) -> None:
    import json

    from censusrecon.experiments.config import load_config
    from censusrecon.experiments.results import nothing_half_made
    from censusrecon.experiments.sweep import sweep

    cfg = load_config(args.config, args.overrides)
    with nothing_half_made(Path(args.out) / cfg.name / cfg.digest()):
        summary = sweep(cfg, args.out, args.backend, args.address, progress=not args.no_progress)
    print(json.dumps(summary))


def _report(args) -> None:
    from censusrecon.experiments.report import write_run_report, write_seeds_report
    from censusrecon.experiments.results import results_dir

    md = (write_run_report(results_dir(args.run_dir[0], args.out, args.overrides)) if len(args.run_dir) == 1
          else write_seeds_report([results_dir(d, args.out, args.overrides) for d in args.run_dir]))
    print(md.with_suffix(".html"))
    print(md)


def _plot(args) -> None:
    from censusrecon.experiments.results import results_dir
    from censusrecon.experiments.runner import replot

    for path in replot(results_dir(args.run_dir, args.out, args.overrides)):
        print(path)


def _release_template(args) -> None:
    from censusrecon.experiments.config import load_config
    from censusrecon.experiments.release.files import write_template

    path, rows, units = write_template(load_config(args.config, args.overrides), args.to, force=args.force)
    print(f"{path}: {rows} cells of {units} units; fill the value column")


def _example_data(args) -> None:
    from censusrecon.microdata.example import AGENCY_RELEASE, write_agency_example, write_agency_release

    release = Path(args.out_dir) / AGENCY_RELEASE
    if release.exists() and not args.force:  # before anything is written: nothing half made
        raise CensusReconError(f"{release} exists and example-data never replaces a file: nothing was "
                               "written; choose another folder, or pass --force")
    for path in write_agency_example(args.out_dir, seed=args.seed, force=args.force):
        print(path)
    print(write_agency_release(args.out_dir, seed=args.seed, force=args.force))


def _check_out(out: str) -> None:
    """The results root must be a directory we can write in (created when missing)."""
    import os
    from pathlib import Path

    from censusrecon.experiments.config import ConfigError

    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--out {out!r} is a file; give a directory for the results (default: results)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out {out!r} cannot be created: {e.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {out!r} is not writable by this user; choose another directory")


def _queries(args) -> None:
    import json

    from censusrecon.experiments.config import load_config
    from censusrecon.experiments.runner import unit_queries

    cfg = load_config(args.config, args.overrides)
    for row in unit_queries(cfg):
        if args.json:
            print(json.dumps(row))
        elif row["empty"]:
            print(f"{row['unit']}: listed, but nobody lives there: every table is zero; reported as empty, not attacked")
        else:
            tables = ", ".join(f"{k} {v}" for k, v in row["cells_per_table"].items())
            blocks = (f"{row['num_blocks']} blocks ({row['occupied_blocks']} occupied), " if row["num_blocks"] else "")
            print(f"{row['unit']}: {blocks}{row['num_queries']} distinct queries ({tables})")


def _describe_population(args) -> int:
    import json
    from pathlib import Path

    from censusrecon.experiments.config import load_config
    from censusrecon.experiments.problem import load_population
    from censusrecon.microdata.describe import describe, format_table

    cfg = load_config(args.config, args.overrides)
    with_gq = None
    if cfg.data.source == "embedded":  # the 2010-shaped generator knows who lives in group quarters
        from censusrecon.microdata.sources import embedded_2010

        with_gq = embedded_2010(cfg.data.model_dump(mode="python"))
    pop = load_population(cfg, None if with_gq is None else with_gq[0])
    stats = describe(pop, group_quarters=None if with_gq is None else with_gq[1])
    if args.json:
        for s in stats:
            print(json.dumps({"statistic": s.name, "value": round(s.value, 4), "target_2010": s.target,
                              "tolerance": s.tolerance, "within": s.within, "tuned": s.tuned, "source": s.source}))
    else:
        shape = cfg.data.population.shape if cfg.data.source == "embedded" else cfg.data.source
        print(f"{cfg.name}: population of data.source {cfg.data.source!r}"
              + (f", shape {shape!r}" if cfg.data.source == "embedded" else "") + "; 2010 figures and sources: "
              "docs/pages/calibration.md")
        print(format_table(stats))
        for tuned, what in ((True, "tuned statistics"), (False, "validation statistics (never tuned on)")):
            part = [s for s in stats if s.tuned is tuned]
            off = [s.name for s in part if s.within is False]
            print(f"{len(off)} of {sum(s.within is not None for s in part)} {what} outside their tolerance"
                  + (f": {', '.join(off)}" if off else ""))
    if args.plot:
        from censusrecon.experiments.plots import plot_population

        for p in plot_population(stats, Path(args.plot), title=f"{cfg.name}: population beside 2010"):
            print(p, file=sys.stderr)
    return EXIT_BAD_INPUT if args.check and any(s.within is False for s in stats) else 0


def _audit(args) -> int:
    import json

    from censusrecon.experiments.config import ConfigError, load_config
    from censusrecon.experiments.problem import resolve
    from censusrecon.experiments.release.audit import audit_release
    from censusrecon.synth.audit.measured import white_box_words

    cfg = load_config(args.config, args.overrides)
    if cfg.release is None:
        raise ConfigError(f"{args.config} has no 'release' section: nothing to audit")
    from censusrecon.experiments.release.program import check_environments

    check_environments(cfg)  # before any work: a missing environment names its make target
    t0 = time.perf_counter()
    from censusrecon.synth.audit.timing import record_audit
    from censusrecon.experiments.release.evaluate import release_dir
    from censusrecon.experiments.results import code_fingerprint

    history = release_dir("results", cfg) / "audit_history.jsonl"
    results = audit_release(resolve(cfg), progress=not (args.json or args.no_progress), seed=args.seed,
                            backend=args.backend, address=args.address, history=history)
    earlier = record_audit(history, results, code_fingerprint())
    from censusrecon.experiments.release.evaluate import save_recorded_audit

    save_recorded_audit(history.parent, cfg, results)  # evaluate-release of this code and config reuses it
    if args.json:
        for r in results:
            print(json.dumps(r.as_dict()))
    else:
        print(f"{'mechanism':<22}{'declared ε':>12}{'black box ≥':>13}{'white box ≥':>13}{'share':>7}   {'runs':>7}   "
              f"{'outcome':<13} checks")
        for r in results:
            m = r.measured
            flag = "" if r.epsilon_lower_bound <= r.declared_epsilon else "   EXCEEDS THE DECLARED ε"
            print(f"{r.mechanism:<22}{r.declared_epsilon:>12g}{r.epsilon_lower_bound:>13.3f}"
                  f"{white_box_words(m['white_box'], full=False):>13}{m['share']:>7.0%}   {r.runs:>7}   "
                  f"{r.outcome.upper():<13} " + r.checks_summary() + flag)
        loose = [f"{r.mechanism} at ε = {r.declared_epsilon:g}" for r in results
                 if r.outcome == "passed" and not r.measured["tight"]]
        if loose:
            print("measured below half the declared ε (the audit could miss a mechanism spending up to twice it): "
                  + "; ".join(loose))
        if results:
            d = results[0].details
            roles = d.get("unit_roles") or {}
            units = ", ".join(f"{u} ({roles[u]})" if roles.get(u) not in (None, "all", "given") else u
                              for u in d["audited_units"])
            print(f"audit seed {d['audit_seed']} ({d['audit_seed_source']}); units audited: {units}; "
                  f"{time.perf_counter() - t0:.0f} s; recorded in {history}")
    for e in earlier:
        print(f"EARLIER AUDIT FAILED ({e['when']}, seed {e['seed']}): {'; '.join(e['failed'])}; a later audit under "
              "another seed does not replace it", file=sys.stderr)
    from censusrecon.synth.audit.statistics import overall_outcome

    outcome = overall_outcome(results)
    if outcome == "failed":
        print("censusrecon: the audit failed: a mechanism's audited ε exceeds its declared ε or a check failed "
              f"(see above); do not publish with it (exit status {EXIT_AUDIT_FAILED})", file=sys.stderr)
        return EXIT_AUDIT_FAILED
    if outcome == "inconclusive":
        print("censusrecon: the audit is inconclusive: " + "; ".join(_inconclusive_words(r) for r in results
                                                                     if r.outcome == "inconclusive")
              + f"; not shown to keep its ε, so not publishable on this audit's word (exit status {EXIT_UNDECIDED})",
              file=sys.stderr)
        return EXIT_UNDECIDED
    return 0


def _inconclusive_words(r) -> str:
    """One inconclusive audit result in a line: what did not run, and how many runs would certify the ε."""
    needed = r.details.get("runs_to_certify")
    return (f"{r.mechanism} at ε = {r.declared_epsilon:g}: {', '.join(r.unchecked())} not run"
            + (f" ({needed:,} releases per neighbour would certify ε = {r.declared_epsilon:g})" if needed else ""))


def _print_release_summary(run_dir, cfg) -> int:
    """The answer of a release evaluation on the terminal, rendered from its saved decision
    (``decision.json``, :mod:`experiments.release.decision`): first a line per mechanism (PUBLISH at a
    setting, DO NOT PUBLISH or CANNOT DECIDE, with the first reason), then each mechanism's verdict with
    the one-sided limit the rule compares with the tolerance and the estimate labelled apart, its audit,
    backend and risks, and the next step; any audit failure; the report's paths. Returns the decision's
    exit status."""
    from censusrecon.experiments.metrics import variant_label
    from censusrecon.experiments.release.decision import HEADS, load_decision, terminal_lines
    from censusrecon.experiments.release.release_report import load_audits

    decision = load_decision(run_dir)
    variants = list(dict.fromkeys(v.variant for m in decision.mechanisms for v in m.verdicts))
    for line in terminal_lines(decision, {v: variant_label(v, variants) for v in variants}):
        print(line)
    audits = load_audits(run_dir)
    for a in audits:
        if a.outcome == "failed":
            print(f"AUDIT FAILED: {a.mechanism} at ε = {a.declared_epsilon:g}: audited ε ≥ {a.epsilon_lower_bound:.3f}; "
                  f"{a.checks_summary()}")
        elif a.outcome == "inconclusive":
            print(f"AUDIT INCONCLUSIVE (not passed): {_inconclusive_words(a)}; not shown to keep its ε: do not publish "
                  "it on this audit's word")
    unchecked = sorted({f"{k} ({c})" for a in audits for k, c in a.checks.items()
                        if c.startswith(("declared", "not applicable"))})
    if unchecked:
        print("not audited: " + "; ".join(unchecked))
    print(f"\nresults: {run_dir}\nreport: {run_dir / 'report.html'}\n        {run_dir / 'report.md'}")
    status = decision.exit_status()
    said = {EXIT_AUDIT_FAILED: "an audit of the publishing code failed: do not publish with it",
            EXIT_DO_NOT_PUBLISH: "DO NOT PUBLISH " + ", ".join(m.mechanism for m in decision.mechanisms
                                                              if m.action == "do_not_publish"),
            EXIT_UNDECIDED: "CANNOT DECIDE " + ", ".join(m.mechanism for m in decision.mechanisms
                                                          if m.action == "cannot_decide") + ": see next: above"}
    if status:
        print(f"censusrecon: {said[status]} (exit status {status})", file=sys.stderr)
    else:
        print(f"censusrecon: {HEADS['publish']} every mechanism at the settings above (exit status 0)", file=sys.stderr)
    return status


def _print_summary(run_dir) -> None:
    import pandas as pd

    from censusrecon.experiments.metrics import (average_curves, difference_words, persons_reconstructed, saturation,
                                     saturation_words, summarise_persons, variant_label)
    from censusrecon.experiments.release.release_report import persons_words

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
                best = f" ({p['best_baselines']})" if "best_baselines" in p else ""
                print(f"  {m}: {persons_words(p)} reconstructed, best guess without the statistics{best} "
                      f"{int(p['baseline_persons'])}; difference {difference_words(p)}")
        if (run_dir / "strength.parquet").exists():
            st = pd.read_parquet(run_dir / "strength.parquet")
            for _, r in saturation(st[st["variant"] == v], ["method"]).iterrows():
                print(f"  strength of {r['method']} (persons, all units): {saturation_words(r)}")


#: what each command runs (its arguments are :func:`build_parser`'s); a command returns its exit status, or None for 0
COMMANDS = {"run": _run, "evaluate-release": _evaluate_release, "sweep": _sweep, "queries": _queries,
            "describe-population": _describe_population, "report": _report, "audit": _audit, "plot": _plot,
            "release-template": _release_template, "example-data": _example_data}


if __name__ == "__main__":
    sys.exit(main())
