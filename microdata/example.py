"""A small agency-style person file and its public block list, generated from the embedded population
with an agency's own column names and codes (for the worked example; never committed data)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from microdata.errors import CensusReconError
from microdata.population import PopulationSpec, embedded_population

#: The example's codes for the embedded population's RACE groups and its SEX and HISP.
RACE_CODES = ("W", "B", "AIAN", "A", "NHPI", "O", "2+")
SEX_CODES = ("M", "F")
HISP_CODES = ("N", "Y")


def write_agency_example(out_dir: str | Path, seed: int = 0, states: int = 1, counties_per_state: int = 2,
                         tracts_per_county: int = 3, blocks_per_tract: tuple[int, int] = (6, 12),
                         force: bool = False) -> tuple[Path, Path]:
    """Write ``persons.csv`` (st, cty, tract, blk, age, sex, hisp, race; one row per person, in
    shuffled order as a real extract would be) and ``blocks.csv`` (every block with its parents,
    the empty ones included) into ``out_dir``; return their paths. Written atomically. An existing
    file of either name is never replaced unless ``force``: nothing is written then (it may be the
    user's own data, which the example config would go on to read)."""
    out = Path(out_dir)
    paths = out / "persons.csv", out / "blocks.csv"
    there = [p for p in paths if p.exists() or p.is_symlink()]
    if there and not force:
        raise CensusReconError(f"{there[0]} exists and example-data never replaces a file: nothing was written; "
                               "choose another folder, or pass --force to replace "
                               + " and ".join(p.name for p in there))
    out.mkdir(parents=True, exist_ok=True)
    pop = embedded_population(seed, PopulationSpec(states=states, counties_per_state=counties_per_state,
                                                   tracts_per_county=tracts_per_county,
                                                   blocks_per_tract=blocks_per_tract))
    geo = pop.geography
    block = geo.units("block")
    order = np.random.default_rng(seed).permutation(len(pop))
    persons = pd.DataFrame({
        "st": [b[:2] for b in block], "cty": [b[2:5] for b in block],
        "tract": [b[5:11] for b in block], "blk": [b[11:] for b in block],
        "age": pop.column("AGE"), "sex": np.array(SEX_CODES)[pop.column("SEX")],
        "hisp": np.array(HISP_CODES)[pop.column("HISP")], "race": np.array(RACE_CODES)[pop.column("RACE")],
    }).iloc[order]
    listed = geo.catalogue.ids["block"]
    units = pd.DataFrame({"st": [b[:2] for b in listed], "cty": [b[2:5] for b in listed],
                          "tract": [b[5:11] for b in listed], "blk": [b[11:] for b in listed]})
    for df, path in zip((persons, units), paths):
        tmp = path.with_name(f".{path.name}.tmp")
        df.to_csv(tmp, index=False)
        tmp.replace(path)
    return paths
