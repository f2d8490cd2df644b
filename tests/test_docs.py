"""The documentation: the site builds with --strict, and every command block of the README runs as
written after the two set-up commands (parsed by the real parser, its config loaded with its
overrides, and the commands that take seconds run for real)."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.cli import _parser, main
from experiments.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def test_the_documentation_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "docs" / "mkdocs.yml"),
                          "-d", str(tmp_path / "site")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
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
    from experiments.reference import cli_reference, config_reference

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
        args = _parser().parse_args(argv[1:])  # exits (fails the test) on anything the parser refuses
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
