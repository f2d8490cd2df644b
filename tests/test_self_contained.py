"""The project stands on its own: no config, doc, README, notebook or code names a file outside the
repository, and every data file a shipped config reads ships with it."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
#: a reference to the developers' shared folder beside the checkout, in any spelling
OUTSIDE = re.compile(r"(?:\.\./)+shared/|\bshared/(?:notes|data|seeds)\b|[\"']shared[\"']\s*/\s*[\"'](?:notes|data|seeds)")


def _texts():
    for pattern in ("README.md", "Makefile", "pyproject.toml", "docs/**/*.md", "docs/*.yml", "configs/**/*.yaml",
                    "notebooks/*.py", "bench/**/*.py", "microdata/**/*.py", "reconstruct/**/*.py",
                    "baselines/**/*.py", "synth/**/*.py", "experiments/**/*.py", "tests/**/*.py"):
        yield from (f for f in ROOT.glob(pattern) if f != Path(__file__))  # this file's own examples aside


def test_nothing_names_a_path_outside_the_repository():
    assert OUTSIDE.search("path: ../../../shared/data/x.csv") and OUTSIDE.search("see shared/notes/a.md")
    assert OUTSIDE.search('ROOT.parent / "shared" / "data" / "x"') and not OUTSIDE.search('ROOT / "microdata" / "data"')
    bad = [f"{f.relative_to(ROOT)}:{i}" for f in _texts() for i, line in enumerate(f.read_text().splitlines(), 1)
           if OUTSIDE.search(line)]
    assert not bad, bad


def test_every_shipped_config_reads_data_inside_the_repository():
    """Each config's data files resolve inside the repository, and exist: the shipped data (microdata/data).
    Files under inputs/ are the user's own (written by example-data or brought), and folktables' ACS files
    are fetched into their folder on demand (data.download: true), so those two may be absent."""
    checked = 0
    for cfg in sorted((ROOT / "configs").rglob("*.yaml")):
        data = (yaml.safe_load(cfg.read_text()) or {}).get("data") or {}
        for key in ("path", "units_file", "dictionary"):
            if not data.get(key):
                continue
            where = (cfg.parent / data[key]).resolve()
            assert where.is_relative_to(ROOT), f"{cfg.relative_to(ROOT)}: data.{key} {data[key]} is outside the repository"
            if not where.is_relative_to(ROOT / "inputs") and data.get("source") != "folktables":
                assert where.exists(), f"{cfg.relative_to(ROOT)}: data.{key} {data[key]} does not exist"
                checked += 1
    assert checked >= 5  # the NIST excerpts and the PPMF extract


def test_what_users_read_does_not_cite_the_projects_history():
    """Docs, README, configs and the benches' help speak of the tool, not of the issues that built it."""
    history = re.compile(r"\bissue \d+|\bissue #\d+", re.I)
    files = [ROOT / "README.md", *ROOT.glob("docs/pages/*.md"), *ROOT.glob("configs/**/*.yaml"), *ROOT.glob("bench/*.py")]
    bad = [f"{f.relative_to(ROOT)}:{i}" for f in files for i, line in enumerate(f.read_text().splitlines(), 1)
           if history.search(line)]
    assert not bad, bad


def test_every_shipped_data_file_is_package_data():
    """A non-editable install (pip install .) carries every file under microdata/data: each matches a pattern of
    pyproject's package-data (a .csv.gz or an LP file left out installs a package that cannot read its own data)."""
    import fnmatch
    import tomllib

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["censusrecon.microdata"]
    files = [p.relative_to(ROOT / "microdata").as_posix() for p in (ROOT / "microdata" / "data").rglob("*")
             if p.is_file() and "__pycache__" not in p.parts]
    assert files
    left_out = [f for f in files if not any(fnmatch.fnmatch(f, pat) and f.count("/") == pat.count("/")
                                            for pat in patterns)]
    assert not left_out, f"not in pyproject's package-data: {left_out}"
