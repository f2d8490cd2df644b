"""Imports flow one way: microdata <- {reconstruct, baselines} <- synth <- experiments."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OURS = {"microdata", "reconstruct", "baselines", "synth", "experiments"}
ALLOWED = {
    "microdata": set(),
    "reconstruct": {"microdata"},
    "baselines": {"microdata"},
    "synth": {"microdata", "reconstruct", "baselines"},
    "experiments": {"microdata", "reconstruct", "baselines", "synth"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out & OURS


def test_imports_flow_one_way():
    bad = []
    for pkg, allowed in ALLOWED.items():
        for f in (ROOT / pkg).rglob("*.py"):
            for imp in _imports(f) - allowed - {pkg}:
                bad.append(f"{f.relative_to(ROOT)} imports {imp}")
    assert not bad, bad


def test_every_module_opens_with_a_one_line_docstring():
    for pkg in ALLOWED:
        for f in (ROOT / pkg).rglob("*.py"):
            doc = ast.get_docstring(ast.parse(f.read_text()))
            assert doc and doc.strip(), f"{f.relative_to(ROOT)} lacks a module docstring"


def test_library_import_has_no_side_effects():
    import subprocess
    import sys

    code = (
        "import logging, jax\n"
        "before = (len(logging.getLogger().handlers), jax.config.jax_enable_x64)\n"
        "import microdata.population, reconstruct.rap, baselines.priors, experiments.runner\n"
        "after = (len(logging.getLogger().handlers), jax.config.jax_enable_x64)\n"
        "assert before == after, (before, after)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


#: Inside experiments.release, each module may import only those before it (none imports back).
RELEASE_ORDER = {"publish": set(), "topdown": {"publish"}, "files": {"publish"}, "program": {"files", "risks"},
                 "yardstick": set(), "audit": {"publish", "topdown", "files", "program", "yardstick"},
                 "words": set(), "decision": {"words"}, "report": {"words", "decision"}, "risks": set(),
                 "anonymeter_worker": set(),
                 "evaluate": {"publish", "topdown", "audit", "report", "risks", "files", "program", "decision"}}


def test_the_release_package_has_no_import_circle_and_the_attack_side_does_not_import_it():
    bad = []
    for f in (ROOT / "experiments" / "release").glob("*.py"):
        if f.stem == "__init__":
            assert not [n for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))
                        and getattr(n, "module", "") != "__future__"], "the package's __init__ imports nothing"
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("experiments.release."):
                other = node.module.split(".")[2]
                if other not in RELEASE_ORDER[f.stem]:
                    bad.append(f"{f.stem} imports {other}")
    for name in ("runner.py", "problem.py", "metrics.py", "sweep.py", "config.py"):
        if "experiments.release" in (ROOT / "experiments" / name).read_text().replace("experiments.release.report", ""):
            bad.append(f"{name} imports the release package beyond its report")
    assert not bad and set(RELEASE_ORDER) == {f.stem for f in (ROOT / "experiments" / "release").glob("*.py")} - {
        "__init__"}, bad
