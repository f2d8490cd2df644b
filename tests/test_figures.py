"""One record of measured figures: a figure the README or a page quotes from a run carries a marker naming the
committed record it comes from (``bench/results/*.json``) and how each figure is written, and this test reads the
record and finds each figure, so written, on the marker's line. A figure and its record cannot drift apart
unnoticed, a page cannot cite a record the repository lacks, and every row of the README's table of measured
figures must carry its marker.

The marker is an HTML comment (invisible on GitHub and in the built site), in a table's last cell or at the end of
a sentence's line::

    <!-- record bench/results/x.json: rap_rank_persons=count, seconds=min -->

Keys name a record's ``figures`` (``a/b`` for a nested one, ``a/0`` for a list's first; the record itself
where it has no ``figures``).

Every other measured figure is held to its record too. A figure is a number written with a unit of measure
(s, min, ms, µs, h, GB, MB, %, persons, run-steps/s, GFLOP/s, …); a line that writes one must name the
record(s) it comes from, and each of its figures must be a figure of one of them (as written: the same digits
after rounding to the decimals written, a share read as a percentage, seconds read as minutes or hours):

    … took 66.2 s, 7.9 s of it building …  <!-- record bench/results/x.json -->

A paragraph, list, table or code block whose lines all come from the same records names them once, on a line
of its own above it (a blank line between them or not; it holds until the blank line that ends the block)::

    <!-- records bench/results/x.json, docs/published/census_2010.json -->

Figures that are not measurements (a limit, a setting, a tolerance) are named as such on their line, each as
written there: ``<!-- not measured: 60 s, 15 GB -->``. Figures published by others (the Census Bureau's, the
papers') are records too, with their sources: ``docs/published/*.json``."""

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "pages").glob("*.md"))]
MARK = re.compile(r"<!-- record (\S+?): (.+?) -->")
BARE = re.compile(r"<!-- record (\S+?) -->")
BLOCK = re.compile(r"^\s*<!-- records (.+?) -->\s*$")
EXEMPT = re.compile(r"<!-- not measured: (.+?) -->")
COMMENT = re.compile(r"<!--.*?-->")
UNIT = (r"(?:run-steps/s|tracts/s|units/s|GFLOP/s|TFLOP/s|TB/s|persons|minutes|seconds|hours|min|ms|µs|GiB|GB|"
        r"MiB|MB|h|s|%)")
NUMBER = r"[−-]?\d[\d,]*(?:\.\d+)?"
#: a figure: a number, or numbers joined by – or /, with its unit; "13 min 25 s" is one figure
FIGURE = re.compile(rf"(?<![\w.,/=^]){NUMBER}(?:\s?(?:–|/)\s?{NUMBER})*\s?{UNIT}(?![\w/])")
#: a confidence level is a setting, not a measurement: "95% interval", "upper 95% limit", "one-sided 95%"
LEVEL = re.compile(r"(?<![\d.,])(?:90|95|99)%(?= (?:interval|confidence|limit|one-sided|two-sided|CI|level))"
                   r"|(?<=upper |lower |sided )(?:90|95|99)%")
MIN_S = re.compile(r"(?<![\w.,])(\d+) min (\d+) s(?!\w)")


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


def figures_written(text: str) -> list[tuple[str, float, int, str]]:
    """(as written, value, decimals, unit) of every figure of ``text`` (markers removed): each number of a
    range or list, with the unit written after the last.

    >>> [(v, d, u) for _, v, d, u in figures_written("took 13 min 25 s, 1.5–2 GB, 24.0 / 36.5% and −7.6%")]
    [(805.0, 0, 'min_s'), (1.5, 1, 'GB'), (2.0, 0, 'GB'), (24.0, 1, '%'), (36.5, 1, '%'), (-7.6, 1, '%')]
    >>> figures_written("K = 100, T = 1,000, ε = 2, a 95% interval, the upper 95% limit")
    []
    """
    text = LEVEL.sub(" ", COMMENT.sub("", text))
    out = [(m.group(0), 60.0 * int(m.group(1)) + int(m.group(2)), 0, "min_s") for m in MIN_S.finditer(text)]
    text = MIN_S.sub(" ", text)
    for m in FIGURE.finditer(text):
        unit = re.search(UNIT + r"$", m.group(0)).group(0)
        for number in re.findall(NUMBER, m.group(0)[: -len(unit)]):
            plain = number.replace(",", "").replace("−", "-")
            decimals = len(plain.split(".")[1]) if "." in plain else 0
            out.append((m.group(0), float(plain), decimals, unit))
    return out


def record_values(record) -> list[float]:
    """Every number of a record's ``figures`` (the record itself where it has none), nested ones included."""
    def walk(v):
        if isinstance(v, bool):
            return
        if isinstance(v, (int, float)):
            yield float(v)
        elif isinstance(v, dict):
            for x in v.values():
                yield from walk(x)
        elif isinstance(v, list):
            for x in v:
                yield from walk(x)
    return list(walk(record.get("figures", record) if isinstance(record, dict) else record))


#: what a record's number may be read as, by the unit the page writes
READ_AS = {"%": (1, 100), "min": (1, 1 / 60), "minutes": (1, 1 / 60), "h": (1, 1 / 3600, 1 / 60),
           "hours": (1, 1 / 3600, 1 / 60), "ms": (1, 1000), "µs": (1, 1e6), "min_s": (1, 60)}


def is_a_figure_of(value: float, decimals: int, unit: str, values: list[float]) -> bool:
    """Whether ``value`` (written with ``decimals`` decimals in ``unit``) is one of ``values`` as written."""
    for v in values:
        for factor in READ_AS.get(unit, (1,)):
            if abs(round(v * factor, decimals) - value) < 1e-9 * max(1.0, abs(value)):
                return True
    return False


def unrecorded(page: Path) -> list[str]:
    """Every figure of ``page`` that is not a figure of a record named on its line or above its block, nor
    named as not measured there: '<page>:<line>: <figure> (<why>)'."""
    out, block, started = [], [], False
    name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
    for n, line in enumerate(page.read_text().splitlines(), 1):
        if not line.strip():
            if started:
                block, started = [], False
            continue
        head = BLOCK.match(line)
        if head:
            block, started = [p.strip() for p in head.group(1).split(",")], False
            continue
        started = True
        paths = block + [m.group(1) for m in MARK.finditer(line)] + [m.group(1) for m in BARE.finditer(line)]
        exempt = [x.strip() for m in EXEMPT.finditer(line) for x in m.group(1).split(",")]
        text = COMMENT.sub("", line)
        for x in exempt:
            if x not in text:
                out.append(f"{name}:{n}: {x!r} is named not measured but is not on the line")
            text = text.replace(x, " ", 1)
        values = []
        for path in paths:
            if not (ROOT / path).is_file():
                out.append(f"{name}:{n}: cites {path}, which is not in the repository")
                continue
            values += record_values(json.loads((ROOT / path).read_text()))
        for written_as, value, decimals, unit in figures_written(text):
            if not paths:
                out.append(f"{name}:{n}: {written_as!r} names no record")
            elif not is_a_figure_of(value, decimals, unit, values):
                out.append(f"{name}:{n}: {written_as!r} is not a figure of {', '.join(paths)}")
    return out


def test_every_figure_of_the_readme_and_the_pages_is_a_figure_of_its_record():
    wrong = [x for page in PAGES for x in unrecorded(page)]
    assert not wrong, f"{len(wrong)} figures without their record:\n" + "\n".join(wrong[:60])


def test_a_figure_edited_away_from_its_record_or_without_one_fails(tmp_path, monkeypatch):
    """The check itself can fail: a figure edited on a line, in a block, a figure with no record, a record
    the repository lacks, a setting named not measured that the line does not have."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "r.json").write_text(json.dumps({"figures": {"seconds": 805, "share": 0.0099, "gb": 4.4}}))
    page = tmp_path / "p.md"
    good = ("took 13 min 25 s (about 13 minutes), 0.99%, peak 4.4 GB <!-- record r.json -->\n\n"
            "<!-- records r.json -->\n\n| a | 805 s |\n| b | 4.4 GB |\n\n"
            "a limit of 60 s <!-- not measured: 60 s --> with K = 24\n")
    page.write_text(good)
    assert unrecorded(page) == []
    for bad in (good.replace("13 min 25 s", "13 min 26 s"), good.replace("| 805 s", "| 806 s"),
                good.replace(" <!-- record r.json -->", ""), good.replace("r.json -->\n\n", "q.json -->\n\n"),
                good.replace("a limit of 60 s", "a limit of 90 s"), good + "\n12.5 persons\n"):
        page.write_text(bad)
        assert unrecorded(page), bad


def test_the_published_record_holds_every_2010_figure_the_population_is_held_to():
    """The 2010 figures the pages quote and the ones the code tunes and validates the embedded population
    against are one record: its ``held_by_microdata_describe`` is describe.py's tables, figure for figure."""
    from censusrecon.microdata import describe

    held = json.loads((ROOT / "docs/published/census_2010.json").read_text())["figures"]["held_by_microdata_describe"]
    for name, table in (("tuned", describe.TARGETS), ("tuned_block_groups", describe.BLOCK_GROUP_TARGETS),
                        ("validation", describe.VALIDATION)):
        assert held[name] == {k: {"2010": v, "tolerance": t, "source": s} for k, (v, t, s) in table.items()}, name
    assert held["by_block_size"] == {**{k: list(v) for k, v in describe.TARGETS_BY_BIN.items()},
                                     "unique_bin38_published": list(describe.UNIQUE_BIN38_PUBLISHED)}
    assert held["by_block_size_tolerance"] == {k: list(v) for k, v in describe.TOLERANCE_BY_BIN.items()}


def test_the_bureaus_figures_the_reports_print_are_the_published_records():
    """The Bureau's figures printed beside ours (experiments/report.py) are the record's, figure for figure."""
    from censusrecon.experiments import report

    held = json.loads((ROOT / "docs/published/census_2010.json").read_text())["figures"]["held_by_experiments_report"]
    assert held["reid_precision"] == {f"{a} {g}": v for (a, g), v in report.BUREAU_REID.items()}
    assert held["solvar_percentiles"] == {str(k): v for k, v in report.BUREAU_SOLVAR_PERCENTILES.items()}
    assert held["hdf_agreement"] == list(report.BUREAU_HDF_AGREEMENT)
    assert held["by_size"] == {k: list(v) for k, v in report.BUREAU_BY_SIZE.items()}
    assert held["overall"] == list(report.BUREAU_OVERALL)
