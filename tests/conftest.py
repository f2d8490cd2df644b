"""Shared fixtures: small deterministic datasets and the repository root."""

from pathlib import Path

import numpy as np
import pytest

from microdata.dataset import Dataset
from microdata.domain import Domain

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture
def small_data() -> Dataset:
    rng = np.random.default_rng(0)
    dom = Domain.from_sizes({"A": 2, "B": 3, "C": 4})
    codes = np.stack([rng.integers(0, s, 40) for s in dom.sizes], axis=1)
    return Dataset(dom, codes)
