"""An audit's time said before it starts, and its history: what each (mechanism, ε) took, what failed."""

from __future__ import annotations

from pathlib import Path

from censusrecon.synth.audit.statistics import AuditResult, overall_outcome
from censusrecon.synth.registry import PROGRAM_PREFIX


def task_order(spec, jobs: list, timed: dict | None = None) -> list[tuple]:
    """The (variant, ε, mechanism or program) tasks of the audit ``spec`` (:class:`synth.audit.source.AuditSpec`) in
    the order the Ray backend submits them: the longest first by ``timed`` (an earlier audit's :func:`last_timing`),
    so that the last to end on few cores is a short one; without it the programs first (a program's calls are most of
    an audit's time), in the config's order."""
    names = [PROGRAM_PREFIX + p.name for p in spec.programs] + list(spec.mechanisms)
    return _task_order_by([(wb, eps, name) for name in names for wb, eps in jobs], timed)


def _task_order_by(tasks: list[tuple], timed: dict | None) -> list[tuple]:
    """``tasks`` the longest first by ``timed``'s seconds (stable), or as they are without it."""
    if not timed:
        return list(tasks)
    return sorted(tasks, key=lambda t: -float(timed["seconds_by_audit"][timing_key(t[2], t[1], t[0])]))


def last_timing(history: Path | None, tasks: list[tuple], units: list[str], shipped: dict | None = None
                ) -> dict | None:
    """The last audit in ``history`` (:func:`record_audit`'s lines) of the same ``units`` that timed every one of
    ``tasks``; without one, ``shipped`` (:func:`shipped_timing`) where it covers them; else None."""
    import json

    keys = [timing_key(name, eps, wb) for wb, eps, name in tasks]

    def covers(e: dict) -> bool:
        return e.get("units") == list(units) and all(k in (e.get("seconds_by_audit") or {}) for k in keys)

    entries = ([json.loads(x) for x in history.read_text().splitlines() if x.strip()]
               if history is not None and history.exists() else [])
    own = [e for e in entries if covers(e)]
    return own[-1] if own else (shipped if shipped is not None and covers(shipped) else None)


def shipped_timing(cfg, results: Path | None = None) -> dict | None:
    """The per-(mechanism, ε) times of this very config's audit as the repository records them
    (``bench/results/*.json`` with ``figures.audit_timing``, its ``digest`` the config's own): what a first audit
    on a machine says its time from, naming the record and its machine. None outside a checkout, or where no
    record times this config as it is (any change to it, an override included, changes its digest)."""
    import json

    import censusrecon

    root = results or Path(censusrecon.__file__).resolve().parents[1] / "bench" / "results"
    if not root.is_dir():
        return None
    digest, found = cfg.digest(), None
    for p in sorted(root.glob("*.json")):
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        t = (rec.get("figures") or {}).get("audit_timing") if isinstance(rec, dict) else None
        if isinstance(t, dict) and t.get("digest") == digest:
            found = dict(t, record=p.name, machine=(rec.get("machine") or {}).get("cpu", "another machine"))
    return found


def timing_key(name: str, eps: float, wb: bool) -> str:
    return f"{name} ε={eps:g}" + (" with BLOCK" if wb else "")


def expected_time(last: dict | None, tasks: list[tuple], backend: str, cpus: int, address: str | None = None) -> str:
    """The audit's time, said before it starts, from ``last`` (:func:`last_timing`: an earlier audit of the same
    units that timed every (mechanism, ε, variant) of ``tasks``): their sum here, or under Ray their schedule in
    submission order on ``cpus`` workers (each task to the first free one, as Ray does); else why it cannot be
    said.

    >>> import json, tempfile
    >>> h = Path(tempfile.mkdtemp()) / "audit_history.jsonl"
    >>> h.write_text(json.dumps({"when": "2026-12-05T21:04:00+00:00", "units": ["u"], "seconds_by_audit":
    ...     {"a ε=1": 400, "b ε=1": 500, "c ε=1": 600}})) and None
    >>> tasks = [(False, 1.0, n) for n in "abc"]
    >>> expected_time(last_timing(h, tasks, ["u"]), tasks, "local", 1)[:63]
    'expected about 25 min (the audit of 2026-12-05T21:04:00+00:00 o'
    >>> expected_time(last_timing(h, tasks, ["u"]), tasks, "ray", 2)[:17]  # a and b at once, c after a: 1,000 s
    'expected about 17'
    >>> [t[2] for t in _task_order_by(tasks, last_timing(h, tasks, ["u"]))]  # the longest first
    ['c', 'b', 'a']
    >>> expected_time(last_timing(h, tasks, ["v"]), tasks, "local", 1)[:40]
    'time not known ahead: no earlier audit o'
    """
    keys = [timing_key(name, eps, wb) for wb, eps, name in tasks]
    if last is None:
        return ("time not known ahead: no earlier audit of these units here timed every one of its "
                f"{len(keys)} (mechanism, ε) audits; the lines below estimate the rest as audits end")
    seconds = [float(last["seconds_by_audit"][k]) for k in keys]
    if backend == "ray" and address is None:
        total, how = max(expected_finish(seconds, cpus)), f"as {len(keys)} Ray tasks on {cpus} CPUs"
    elif backend == "ray":
        total, how = sum(seconds), "summed: the cluster's CPUs are not known here, so the time is at most this"
    else:
        total, how = sum(seconds), "one after another"
    longest = max(zip(seconds, keys))
    source = (f"the audit of {last['when']} of the same units" if "record" not in last else
              f"no audit here yet: bench/results/{last['record']} times this config's audit of {last['when']} on "
              f"{last['machine']}, a machine this one may not match")
    return (f"expected about {_duration(total)} ({source}; {_duration(sum(seconds))} of work, {how}; the longest, "
            f"{longest[1]}, {_duration(longest[0])})")


def expected_finish(seconds: list[float], workers: int) -> list[float]:
    """When each task ends if they are given in this order to the first free of ``workers`` (as Ray does, and
    one worker in turn as the local backend does).

    >>> expected_finish([600, 500, 400], 2), expected_finish([600, 500, 400], 1)
    ([600.0, 500.0, 900.0], [600.0, 1100.0, 1500.0])
    """
    import heapq

    free, out = [0.0] * max(workers, 1), []
    for t in seconds:
        end = heapq.heappop(free) + float(t)
        heapq.heappush(free, end)
        out.append(end)
    return out


def _duration(seconds: float) -> str:
    """Seconds as a person reads them: "40 s", "17 min".

    >>> _duration(40.2), _duration(1040)
    ('40 s', '17 min')
    """
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def record_audit(history: Path, results: list[AuditResult], code: str) -> list[dict]:
    """Append one audit to ``history`` (JSON lines: when, seed, code, passed, what failed) and return the
    earlier audits of the same code that failed: a re-run under another seed is recorded beside a failed
    one, never in its place."""
    import datetime as _dt
    import json

    earlier = failed_audits(history, code)
    d = results[0].details if results else {}
    entry = {"when": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "code": code,
             "seed": d.get("audit_seed"), "seed_source": d.get("audit_seed_source"),
             "passed": all(r.passed for r in results),
             "outcome": overall_outcome(results),
             "failed": sorted({f"{r.mechanism} ε={r.declared_epsilon:g}: " + ", ".join(r.failed_checks() or ["bound"])
                               for r in results if r.outcome == "failed"}),
             "inconclusive": sorted({f"{r.mechanism} ε={r.declared_epsilon:g}: " + ", ".join(r.unchecked())
                                     + " not run" for r in results if r.outcome == "inconclusive"}),
             "units": d.get("audited_units"),
             # each (mechanism, ε, variant)'s own time: the next audit of the same plan says its time ahead from them
             "seconds_by_audit": {timing_key(r.mechanism, r.declared_epsilon, r.details.get("with_block", False)):
                                  r.details["audit_seconds"] for r in results if "audit_seconds" in r.details}}
    history.parent.mkdir(parents=True, exist_ok=True)
    with history.open("a") as fh:
        fh.write(json.dumps(entry) + "\n")
    return earlier


def failed_audits(history: Path, code: str, besides: str | None = None) -> list[dict]:
    """The failed audits of the same ``code`` recorded in ``history`` (:func:`record_audit`'s JSON
    lines), but the one recorded at ``besides``."""
    import json

    if not history.exists():
        return []
    entries = [json.loads(x) for x in history.read_text().splitlines() if x.strip()]
    return [e for e in entries if e.get("outcome", "passed" if e["passed"] else "failed") == "failed"
            and e.get("code") == code and e.get("when") != besides]
