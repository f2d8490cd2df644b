"""One record of measured figures: a figure the README or a page quotes from a run carries a marker naming the
committed record it comes from (``bench/results/*.json``) and how each figure is written, and this test reads the
record and finds each figure, so written, on the marker's line. A figure and its record cannot drift apart
unnoticed, a page cannot cite a record the repository lacks, and every row of the README's table of measured
figures must carry its marker.

The marker is an HTML comment (invisible on GitHub and in the built site), in a table's last cell or at the end of
a sentence's line::

    <!-- record bench/results/x.json: rap_rank_persons=count, seconds=min -->

Keys name a record's ``figures`` (``a/b`` for a nested one, ``a/0`` for a list's first; the record itself
where it has no ``figures``)."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "pages").glob("*.md"))]
MARK = re.compile(r"<!-- record (\S+?): (.+?) -->")


def _min(s: float) -> str:
    return f"{round(s / 60)} min"


# how a figure is written: each takes the record's value
WRITTEN = {
    "count": lambda v: f"{int(v):,}",
    "pct": lambda v: f"{v:.1f}%",  # a percentage, one decimal
    "share_pct2": lambda v: f"{100 * v:.2f}%",  # a share in [0, 1] as a percentage, two decimals
    "pct_range": lambda v: f"{v[0]:.1f}–{v[1]:.1f}%",
    "x": lambda v: f"{v}",
    "s": lambda v: f"{v:,} s",
    "s_range": lambda v: f"{v[0]}–{v[1]} s",
    "min": _min,
    "min_range": lambda v: f"{round(v[0] / 60)}–{round(v[1] / 60)} min",
    "min_s": lambda v: f"{int(v) // 60} min {int(v) % 60} s",
    "epsilon": lambda v: f"ε = {v}",
}


def written(value, how: str) -> str:
    """``value`` as the pages write a figure of kind ``how`` (WRITTEN)."""
    if how not in WRITTEN:
        raise KeyError(f"unknown way of writing a figure {how!r}; the ways are {sorted(WRITTEN)}")
    return WRITTEN[how](value)


def figure(record: dict, key: str):
    value = record.get("figures", record)
    for part in key.split("/"):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def markers() -> list[tuple[str, int, str, str, str]]:
    """(page, line number, line, record path, figures) for every marker of the README and the pages."""
    out = []
    for page in PAGES:
        for i, line in enumerate(page.read_text().splitlines(), 1):
            for m in MARK.finditer(line):
                out.append((str(page.relative_to(ROOT)), i, line, m.group(1), m.group(2)))
    return out


def test_the_ways_of_writing_a_figure_on_hand_made_values():
    assert written(10644, "count") == "10,644" and written(18.1, "pct") == "18.1%"
    assert written(0.0099, "share_pct2") == "0.99%" and written([57.5, 72.1], "pct_range") == "57.5–72.1%"
    assert written(788, "min_s") == "13 min 8 s" and written(4200, "min") == "70 min"
    assert written([1500, 1800], "min_range") == "25–30 min" and written([220, 253], "s_range") == "220–253 s"
    assert written(2.7, "x") == "2.7" and written(1117, "s") == "1,117 s" and written(2, "epsilon") == "ε = 2"
    with pytest.raises(KeyError, match="unknown way"):
        written(1, "roman")


def test_every_marked_figure_is_its_records_figure():
    found = markers()
    assert len(found) >= 12, "the README's measured table and the pages' figures carry their records"
    for page, n, line, path, spec in found:
        where = f"{page}:{n}"
        record_file = ROOT / path
        assert record_file.is_file(), f"{where} cites {path}, which is not in the repository"
        record = json.loads(record_file.read_text())
        text = MARK.sub("", line)
        for item in spec.split(","):
            key, _, how = item.strip().partition("=")
            assert how, f"{where}: {item!r} is not key=how"
            want = written(figure(record, key), how)
            assert want in text, f"{where} should write {key} of {path} as {want!r}: {text.strip()[:200]}"


def test_every_row_of_the_readmes_measured_table_names_its_record():
    text = (ROOT / "README.md").read_text()
    table = text.split("\n## Measured\n", 1)[1].split("\n## ", 1)[0]
    rows = [x for x in table.splitlines() if x.startswith("| ") and not x.startswith("| job ")]
    assert len(rows) >= 8
    for row in rows:
        assert MARK.search(row), f"a figure of the README without its record: {row[:120]}"


def test_a_figure_that_disagrees_with_its_record_fails(tmp_path):
    """The check itself can fail: a row whose figure was edited away from its record."""
    record = tmp_path / "r.json"
    record.write_text(json.dumps({"figures": {"persons": 6603}}))
    for line, ok in (("| RAP-Rank 6,603 | <!-- record r.json: persons=count --> |", True),
                     ("| RAP-Rank 6,106 | <!-- record r.json: persons=count --> |", False)):
        [(_, spec)] = [(m.group(1), m.group(2)) for m in MARK.finditer(line)]
        key, _, how = spec.partition("=")
        rec = json.loads(record.read_text())
        assert (written(figure(rec, key), how) in MARK.sub("", line)) is ok
