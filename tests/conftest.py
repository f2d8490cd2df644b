"""Shared fixtures: small deterministic datasets and the repository root.

The session shares one persistent XLA compilation cache (and so do the command lines and notebooks
it starts, through the environment): many tests compile the same small programs again, and a
program is looked up by its compiled form, never by the test that made it.

Matmuls run at full float32 in the tests, on every backend: the tests compare the hand-written
answers and gradients with their definitions at float32 tolerances, while JAX's default on an
NVIDIA GPU multiplies float32 operands in TF32 (10-bit mantissas), which the library keeps for its
speed (docs/pages/performance.md). On a CPU the two are the same arithmetic."""

import os
import tempfile
from pathlib import Path

os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      str(Path(tempfile.gettempdir()) / f"censusrecon-test-xla-cache-{os.getuid()}"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")  # and for the command lines tests start

import jax

import numpy as np
import pytest

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Domain

jax.config.update("jax_default_matmul_precision", "highest")  # in case JAX was imported before this file

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def root() -> Path:
    return ROOT


#: make test builds the environments that only a few tests need (the GPU dry run's, Tumult's, SmartNoise's)
#: while the tests run, and names here the file it touches when it is done (its log beside it)
ENVS_BUILDING = "CENSUSRECON_ENVS_BUILDING"


def environment(stamp: Path, what: str, *, required: bool = False, timeout: float = 1200.0) -> None:
    """Wait for ``stamp`` (an environment's .installed) while make test is still building the environments,
    then skip saying ``what`` makes it (or, ``required``, fail with the end of the build's log: an environment
    make test always had, such as the GPU dry run's, must not turn into a skip unnoticed)."""
    import time

    done = os.environ.get(ENVS_BUILDING)
    if done and not stamp.exists():
        end = time.monotonic() + timeout
        while not (stamp.exists() or Path(done).exists()) and time.monotonic() < end:
            time.sleep(2)
    if stamp.exists():
        return
    if required and done:
        log = Path(done).with_name("build.log")
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
        pytest.fail(f"make test did not build {stamp.parent.name} ({what}):\n{tail}")
    pytest.skip(f"no {stamp.parent.name}: {what}")


@pytest.fixture(scope="session")
def compact_agency() -> Path:
    """The agency config on the compact population: the tests' county (01001, 4 tracts, no block groups)."""
    return ROOT / "configs" / "agency" / "release_agency_compact.yaml"


@pytest.fixture
def small_data() -> Dataset:
    rng = np.random.default_rng(0)
    dom = Domain.from_sizes({"A": 2, "B": 3, "C": 4})
    codes = np.stack([rng.integers(0, s, 40) for s in dom.sizes], axis=1)
    return Dataset(dom, codes)


@pytest.fixture(scope="module")
def program_agency(tmp_path_factory):
    """The worked example's files in a fresh folder, and the overrides that point configs/agency/
    own_release.yaml at them with one tract, one ε and no release but the program a test names."""
    from censusrecon.microdata.example import write_agency_example

    d = tmp_path_factory.mktemp("agency")
    persons, blocks = write_agency_example(d / "inputs")
    return d, [f"data.path={persons}", f"data.units_file={blocks}", "target.units=1", "release.mechanisms=[]",
               "release.epsilons=[2.0]", "release.files=[]", "release.audit.backend=local"]


#: Where the slow tier runs against a clock (``.ci/run`` after ``make test``): the epoch second by which every test
#: of the run must have ended. A test is started only when its expected time (``slow(seconds=...)``, else
#: ``SLOW_SECONDS``) still fits; the others are skipped, saying so.
DEADLINE_ENV = "CENSUSRECON_TEST_DEADLINE"
SLOW_SECONDS = 180


def pytest_runtest_setup(item):
    import time

    deadline = os.environ.get(DEADLINE_ENV)
    if not deadline:
        return
    mark = item.get_closest_marker("slow")
    expected = float(mark.kwargs.get("seconds", SLOW_SECONDS)) if mark else 30.0
    left = float(deadline) - time.time()
    if expected > left:
        pytest.skip(f"not started: expected to take about {expected:.0f} s, {max(left, 0):.0f} s left before "
                    f"{DEADLINE_ENV}")


#: the files that take longest (seconds of one worker, measured with a cold compilation cache on 2026-12-05),
#: handed out first: two workers take files in collection order, and a long file collected last (the notebooks)
#: kept one worker busy for two minutes after the other had finished
LONGEST_FIRST = ["experiments/test_release_audit.py", "experiments/test_audit_corpus.py",
                 "experiments/test_release_program.py", "experiments/test_paper_presets.py", "microdata/test_bureau.py",
                 "test_notebooks.py", "experiments/test_decision.py", "experiments/test_cli.py", "test_gpu_check.py",
                 "experiments/test_release.py", "experiments/test_agency.py", "experiments/test_release_ray.py"]


def pytest_collection_modifyitems(session, config, items):
    """The longest files first (LONGEST_FIRST), every other file after them in its usual order, each file's
    tests in their own order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    here = Path(__file__).parent

    def key(item):
        try:
            name = Path(str(item.fspath)).relative_to(here).as_posix()
        except ValueError:
            name = ""
        return rank.get(name, len(rank))

    items.sort(key=key)  # stable: the rest keep their order
