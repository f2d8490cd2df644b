"""A small agency-style person file and its public block list, generated from the embedded population
with an agency's own column names and codes (for the worked example; never committed data)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.population import PopulationSpec, embedded_population

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
        _write_csv(df, path)
    return paths


def _write_csv(df: pd.DataFrame, path: Path) -> None:
    """Write ``df`` so that a reader sees the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(path)


#: the example agency's release: its tables (as configs/agency/own_release.yaml declares them) and their noise
AGENCY_RELEASE = "agency_tables.csv"


def write_agency_release(out_dir: str | Path, epsilon: float = 1.0, seed: int = 0, force: bool = False) -> Path:
    """The example agency's own release of its tables, made outside censusrecon's code: ``persons.csv``
    tabulated with pandas into TOTAL, SEX_BY_AGE (0-17, 18-64, 65+) and RACE_HISP per block and SEX_BY_SYA
    per tract, for every listed block and tract (empty ones too), each cell's count plus discrete
    Laplace noise (the difference of two geometric draws) of scale 4/ε: one person is in 4 cells, so
    the release is ε-DP under add/remove. Written in the tables layout of ``release.files`` (unit,
    table, cell, geography, value; cells numbered with the first variable slowest), never over an
    existing file unless ``force``."""
    out = Path(out_dir)
    path = out / AGENCY_RELEASE
    if (path.exists() or path.is_symlink()) and not force:
        raise CensusReconError(f"{path} exists and example-data never replaces a file; pass --force to replace it")
    persons = pd.read_csv(out / "persons.csv", dtype=str)
    blocks = pd.read_csv(out / "blocks.csv", dtype=str)
    for df in (persons, blocks):
        df["unit"] = df["st"] + ":" + df["cty"] + ":" + df["tract"]
        df["block"] = df["unit"] + ":" + df["blk"]
    age = persons["age"].astype(int)
    persons["age_group"] = np.select([age <= 17, age <= 64], [0, 1], 2)
    sex = persons["sex"].map({c: i for i, c in enumerate(SEX_CODES)})
    race = persons["race"].map({c: i for i, c in enumerate(RACE_CODES)})
    hisp = persons["hisp"].map({c: i for i, c in enumerate(HISP_CODES)})
    per_block = [("TOTAL", pd.Series(1, index=persons.index), 1),
                 ("SEX_BY_AGE", sex * 3 + persons["age_group"] + 1, 6),
                 ("RACE_HISP", race * len(HISP_CODES) + hisp + 1, len(RACE_CODES) * len(HISP_CODES))]
    rows = []
    for table, cell, cells in per_block:
        counts = persons.assign(cell=cell).groupby(["block", "cell"]).size()
        for unit, block in zip(blocks["unit"], blocks["block"]):
            for c in range(1, cells + 1):
                rows.append((unit, table, c, block, int(counts.get((block, c), 0))))
    sya = persons.assign(cell=sex * 116 + age + 1).groupby(["unit", "cell"]).size()
    for unit in sorted(set(blocks["unit"])):
        for c in range(1, 2 * 116 + 1):
            rows.append((unit, "SEX_BY_SYA", c, unit, int(sya.get((unit, c), 0))))
    df = pd.DataFrame(rows, columns=["unit", "table", "cell", "geography", "value"])
    rng = np.random.default_rng(seed)
    p = 1 - np.exp(-epsilon / 4)  # the two-sided geometric law of scale 4/ε: P(k) ∝ exp(-ε|k|/4)
    df["value"] = df["value"] + rng.geometric(p, len(df)) - rng.geometric(p, len(df))
    out.mkdir(parents=True, exist_ok=True)
    _write_csv(df, path)
    return path
