"""Progress for people: off a terminal, one plain line per unit of work done, none for work found done."""

import io

from censusrecon.experiments.progress import UnitProgress


def test_off_a_terminal_each_unit_done_is_one_line_and_units_found_done_are_counted_silently():
    out = io.StringIO()  # not a terminal: no bar, plain lines
    p = UnitProgress(5, "releases attacked", stream=out, leave=False)
    p.skip(2)  # an earlier call's units: counted, no line each
    assert out.getvalue() == "" and p.done == 2
    p.update(1, "01005000100: topdown, ε = 2")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("[3/5 releases attacked] 01005000100: topdown, ε = 2 done (")
    quiet = io.StringIO()
    q = UnitProgress(5, "releases attacked", enabled=False, stream=quiet)
    q.update(1, "x")
    assert quiet.getvalue() == "" and q.done == 1


def test_the_time_left_follows_the_expected_ends_of_an_earlier_run_at_the_pace_kept(monkeypatch):
    """Units expected to end at 100, 400 and 1,000 s (an earlier audit's times on its workers): the first one done
    at 50 s (twice as fast) leaves 1,000 × 50 / 100 − 50 = 450 s; counted as equals, 100 s."""
    import re

    from censusrecon.experiments import progress

    clock = iter([0.0, 50.0, 50.0])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    out = io.StringIO()
    p = UnitProgress(3, "audits", stream=out, estimate=True, expected_ends={"a": 100.0, "b": 400.0, "c": 1000.0})
    p.update(1, "a")
    assert re.search(r"about 450 s left", out.getvalue()), out.getvalue()
    clock = iter([0.0, 50.0])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    out = io.StringIO()
    q = UnitProgress(3, "audits", stream=out, estimate=True)
    q.update(1, "a")
    assert re.search(r"about 100 s left", out.getvalue()), out.getvalue()
