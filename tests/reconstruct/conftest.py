"""Fixtures of the RAP tests."""

import numpy as np
import pytest

from censusrecon.microdata.census import Cell, CensusWorkload
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Attribute, Domain
from censusrecon.reconstruct.product_plan import ProductPlan


@pytest.fixture(scope="module")
def small_census():
    """A census plan small enough for the fused kernels in Pallas's interpreter: 3 blocks, AGE and SEX, block and
    tract cells. Returns (plan, its answers on 40 random persons, domain)."""
    dom = Domain((Attribute("BLOCK", ("b0", "b1", "b2")), Attribute.range("AGE", 6), Attribute.range("SEX", 2)))
    cells = [Cell("T", 1, "c1", (("AGE", frozenset(range(0, 3))),), "block"),
             Cell("T", 2, "c2", (("AGE", frozenset({4})), ("SEX", frozenset({1}))), "block"),
             Cell("T", 3, "c3", (("SEX", frozenset({0})),), "tract")]
    w = CensusWorkload.build(dom, cells)
    rng = np.random.default_rng(3)
    data = Dataset(dom, np.stack([rng.integers(0, s, 40) for s in dom.sizes], axis=1))
    return ProductPlan.build(w), w.answer(data), dom
