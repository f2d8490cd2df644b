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
