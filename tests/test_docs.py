"""The documentation: the site builds with --strict, and every command block of the README runs as
written after the two set-up commands (parsed by the real parser, its config loaded with its
overrides, and the commands that take seconds run for real)."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from censusrecon.experiments.cli import build_parser, main
from censusrecon.experiments.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def test_the_documentation_site_builds_strictly(tmp_path):
    """As its first line says (mkdocs build --strict): every warning fails it. Run without -q, which hid the
    warnings from --strict's count (the build passed here while the documented command aborted on 4)."""
    pytest.importorskip("mkdocs")
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "docs" / "mkdocs.yml"),
                          "-d", str(tmp_path / "site")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0 and "WARNING" not in out.stderr, out.stderr[-3000:]
    reference = (tmp_path / "site" / "reference" / "index.html").read_text()
    assert "censusrecon evaluate-release" in reference and "release.epsilons" in reference  # generated, filled in
    assert "OUT/&lt;name&gt;/&lt;config-hash&gt;/" in reference and "OUT///" not in reference  # not swallowed as tags
    home = (tmp_path / "site" / "index.html").read_text()
    assert "Three things people do with it" in home  # the README is the home page
    api = (tmp_path / "site" / "api" / "index.html").read_text()  # generated from the docstrings
    for name in ("reconstruct.rap.rap_rank", "experiments.release.evaluate.evaluate_release",
                 "experiments.release.audit.audit_release", "microdata.population.embedded_population"):
        assert f'id="{name}"' in api, name


def test_every_config_key_and_argument_has_a_meaning():
    """The generated reference has no empty meaning: every config key (sections by their docstring) and
    every command's argument says what it does."""
    from censusrecon.experiments.reference import cli_reference, config_reference

    def empty_meanings(text):
        rows = [re.split(r"(?<!\\)\|", line.strip())[1:-1] for line in text.splitlines() if line.startswith("| `")]
        return len(rows), [cells[0].strip() for cells in rows if not cells[-1].strip()]

    assert empty_meanings("| `a` | int | 1 | the a |\n| `b` | int | 2 |  |\n| `c\\|d` | x |  |") == (3, ["`b`", "`c\\|d`"])
    for text in (config_reference(), cli_reference()):
        n, empty = empty_meanings(text)
        assert n > 20 and not empty, empty


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```\n(.*?)```", text, flags=re.S)
    return [line.strip() for b in blocks for line in b.splitlines() if line.strip()]


def test_every_readme_command_runs_as_written(tmp_path, monkeypatch, capsys):
    commands = readme_commands()
    assert commands[:2] == ["make demo", "make test"]  # the two set-up commands come first
    monkeypatch.chdir(ROOT)
    runs = {}
    for line in commands[2:]:
        argv = shlex.split(line)
        assert argv[0] == "censusrecon", line
        args = build_parser().parse_args(argv[1:])  # exits (fails the test) on anything the parser refuses
        if getattr(args, "config", None):
            assert (ROOT / args.config).is_file(), line
            load_config(ROOT / args.config, args.overrides)
        runs[args.command] = argv[1:]
    # the commands that take seconds run for real, in a scratch copy of the example's inputs
    scratch = tmp_path / "inputs" / "agency"
    assert main([*runs["example-data"][:-1], str(scratch)]) == 0
    assert main(["queries", "configs/agency/example.yaml", "--set", f"data.path={scratch / 'persons.csv'}",
                 "--set", f"data.units_file={scratch / 'blocks.csv'}"]) == 0
    assert "distinct queries" in capsys.readouterr().out
    assert {"run", "report", "evaluate-release", "audit", "example-data", "queries"} <= set(runs)


GUIDE = ROOT / "docs" / "pages" / "guide.md"
#: what the guide's command synopsis names, as a reader would fill it in (RESULTS_DIR and OUT_DIR are the walk's own)
FILL = {"CONFIG": "configs/tiny.yaml", "ADDR": "auto", "N": "3", "key=value": "attack.runs=2"}
#: tiny.yaml at a few seconds' strength: the walk checks what the commands do and write, not RAP-Rank's strength
QUICK = ["attack.runs=2", "attack.steps=20", "attack.rows=40", "grid_points=10", "target.units=1"]


def guide_blocks(lang: str = "") -> list[str]:
    return [body for tag, body in re.findall(r"```(\w*)\n(.*?)```", GUIDE.read_text(), flags=re.S) if tag == lang]


def synopsis_commands(fill: dict) -> dict[str, list[str]]:
    """Each synopsis line of the guide's command list as a full command: every optional ``[...]`` group given (its
    first alternative of ``a|b``), ``...`` dropped, each placeholder filled in."""
    block = next(b for b in guide_blocks() if b.lstrip().startswith("censusrecon run CONFIG"))
    out = {}
    for line in block.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = re.sub(r"[\[\]]", " ", line.replace("--set ...", "--set key=value")).replace("...", " ").split()
        argv = [fill.get(w, w.split("|")[0]) for w in words[1:]]
        out[argv[0]] = argv
    return out


def test_the_guide_is_walked_command_by_command(tmp_path, monkeypatch, capsys):
    """The user guide read as a newcomer follows it: every command of its synopsis is one the parser takes with all
    its options; run, report, plot, queries, example-data and --help run for real on the tiny config, and the run
    directory holds every file the guide's layout names; its --set examples load; its person-file config (the YAML
    block) validates and, next to the example files, builds its tables."""
    import yaml

    monkeypatch.chdir(ROOT)
    out, scratch = tmp_path / "results", tmp_path / "inputs"
    run_dir = out / "tiny" / load_config(ROOT / FILL["CONFIG"], QUICK).digest()
    commands = synopsis_commands(dict(FILL, DIR=str(out), RESULTS_DIR=str(run_dir), OUT_DIR=str(scratch)))
    assert {"run", "sweep", "queries", "evaluate-release", "audit", "plot", "report", "example-data", "--help"} <= set(
        commands)
    for name, argv in commands.items():
        if name != "--help":
            build_parser().parse_args(argv)  # exits (fails the test) on an option the parser does not take
    # the commands that take seconds run as the guide types them (the run at QUICK strength)
    assert main([*commands["run"], *[a for o in QUICK for a in ("--set", o)]]) == 0
    layout = next(b for b in guide_blocks() if b.startswith("results/demo/"))
    files = set()
    for line in layout.splitlines()[1:]:
        if line.startswith("  ") and not line.startswith("   "):  # a file column (a wrapped meaning is indented more)
            for n in line[2:].split("  ")[0].split(", "):
                stem, _, exts = n.partition("/")
                files |= {stem} if not exts else {stem, stem.rsplit(".", 1)[0] + exts}  # x.png/.pdf: both
    assert {"config.yaml", "manifest.json", "match_rate.parquet", "match_rate.png", "match_rate.pdf", "units"} <= files
    for f in files:
        assert (run_dir / f).exists(), f"the guide names {f}, which the run did not write"
    for name in ("report", "plot", "queries", "example-data"):
        assert main(commands[name]) == 0, name
    assert (run_dir / "report.html").stat().st_size > 0 and (scratch / "persons.csv").exists()
    with pytest.raises(SystemExit) as e:
        main(commands["--help"])
    assert e.value.code == 0
    capsys.readouterr()
    from censusrecon.experiments.config import ConfigError

    examples = re.findall(r"`--set '?([^`']+)'?`", GUIDE.read_text())  # the prose's --set examples
    assert len(examples) >= 3
    for o in examples:
        if o == "data.path=...":  # the guide's example of an error: a key the embedded population does not read
            with pytest.raises(ConfigError, match="not read by source 'embedded'"):
                load_config(ROOT / FILL["CONFIG"], [o])
        else:
            load_config(ROOT / FILL["CONFIG"], [o])
    # the person-file config: the example config with the guide's data and queries, beside the example's files
    cfg = yaml.safe_load((ROOT / "configs" / "agency" / "example.yaml").read_text())
    (block,) = guide_blocks("yaml")
    cfg.update(yaml.safe_load(block))
    (scratch / "guide.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["queries", str(scratch / "guide.yaml")]) == 0
    assert "distinct queries" in capsys.readouterr().out


def test_the_slow_tier_starts_a_test_only_when_its_expected_time_fits_the_deadline(monkeypatch):
    """``.ci/run``'s clock: with CENSUSRECON_TEST_DEADLINE set, a slow test whose expected time no longer fits is
    skipped (saying so), one that fits runs; without it, nothing is skipped."""
    import time

    from tests.conftest import DEADLINE_ENV, pytest_runtest_setup

    class Item:
        def __init__(self, mark):
            self.mark = mark

        def get_closest_marker(self, name):
            return self.mark if name == "slow" else None

    long, short = Item(pytest.mark.slow(seconds=300).mark), Item(pytest.mark.slow(seconds=20).mark)
    pytest_runtest_setup(long)  # no deadline: runs
    monkeypatch.setenv(DEADLINE_ENV, str(time.time() + 100))
    with pytest.raises(pytest.skip.Exception, match="expected to take about 300 s"):
        pytest_runtest_setup(long)
    pytest_runtest_setup(short)
    monkeypatch.setenv(DEADLINE_ENV, str(time.time() - 1))
    with pytest.raises(pytest.skip.Exception, match="0 s left"):
        pytest_runtest_setup(short)


def test_every_name_the_api_page_lists_exists(root):
    """The API page's mkdocstrings blocks name modules and members; a renamed function must not leave a name there
    that the library no longer has (``audited_units`` did, 2026-12-05)."""
    import importlib
    import re

    page = (root / "docs" / "pages" / "api.md").read_text()
    missing = []
    for module, body in re.findall(r":::\s*([\w.]+)\n((?:[ \t]+.*\n)*)", page):
        mod = importlib.import_module(f"censusrecon.{module}")
        listed = re.search(r"members:\s*\[([^\]]*)\]", body)
        for name in ([n.strip() for n in listed.group(1).split(",") if n.strip()] if listed else []):
            if not hasattr(mod, name):
                missing.append(f"{module}.{name}")
    assert not missing, missing


def _pages(root):
    return [root / "README.md"] + sorted((root / "docs" / "pages").glob("*.md"))


def test_every_table_in_the_pages_renders(root):
    """A Markdown table renders only when its separator row has as many columns as its header (two tables of the
    Bureau's page had fewer and showed as text); every body row has them too."""
    import re

    bad = []
    for page in _pages(root):
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines[:-1]):
            sep = lines[i + 1]
            if not (line.lstrip().startswith("|") and re.fullmatch(r"\s*\|[\s:|-]*-[\s:|-]*\|\s*", sep)):
                continue

            def cols(x):
                return x.replace("\\|", "").strip().strip("|").count("|") + 1

            width = cols(line)
            rows = [sep] + [x for x in lines[i + 2:] if x.lstrip().startswith("|")][:0]
            j = i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                rows.append(lines[j])
                j += 1
            bad += [f"{page.name}:{i + 1 + k + 1}: {cols(r)} columns under a header of {width}"
                    for k, r in enumerate(rows) if cols(r) != width]
    assert not bad, bad


def test_every_exit_status_the_pages_list_is_the_codes(root):
    """The statuses a page lists (the guide once left out 5, DO NOT PUBLISH) are exactly the CLI's."""
    import re

    from censusrecon.experiments.cli import EXIT_STATUSES

    code = set(re.findall(r"(?:^|[:;] )(\d+) ", EXIT_STATUSES.split(":", 1)[1] if ":" in EXIT_STATUSES else EXIT_STATUSES))
    code |= {"0"}
    checked = 0
    for page in _pages(root):
        for para in re.split(r"\n\s*\n", page.read_text()):
            if not re.match(r"\s*Exit statuses", para):
                continue
            said = set(re.findall(r"\*\*(\d+)\*\*|(?:^|[:;] )(\d+) ", para.replace("\n", " ")))
            said = {a or b for a, b in said}
            assert said == code, (page.name, sorted(said), sorted(code))
            checked += 1
    assert checked >= 2  # the guide's and the defence page's


def test_every_file_a_page_cites_is_in_the_repository(root):
    """A path a page names (a link, or a path in backquotes under one of the repository's folders) exists: the pages
    once cited bench/results files that were never committed. Folders a command writes (results/, inputs/, .venv*)
    are not the repository's."""
    import re

    folders = ("configs/", "bench/", "docs/", "experiments/", "synth/", "microdata/", "reconstruct/", "baselines/",
               "notebooks/", "tests/", "censusrecon/")
    missing = []
    for page in _pages(root):
        text = page.read_text()
        cited = {m for m in re.findall(r"`([\w./-]+\.(?:py|yaml|yml|json|jsonl|md|csv|parquet|png|txt|sh|gz))`", text)
                 if m.startswith(folders)}
        for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in link:
                continue
            cited.add(str((page.parent / link).resolve().relative_to(root)) if not link.startswith("/") else link)
        for c in sorted(cited):
            if "*" in c or "<" in c:
                continue
            if not (root / c).exists():
                missing.append(f"{page.name}: {c}")
    assert not missing, missing
