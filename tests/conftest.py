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
               "release.epsilons=[2.0]", "release.files=[]"]


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
