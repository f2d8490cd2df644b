"""Reader for the 2010 demonstration Privacy-Protected Microdata Files (person), in chunks with geographic filters."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from microdata.dataset import Dataset
from microdata.domain import Attribute, Domain
from microdata.errors import CensusReconError
from microdata.geography import Geography
from microdata.population import MAX_AGE, person_domain, race_group

log = logging.getLogger(__name__)

GEO_COLUMNS = ("TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK")
#: PPMF columns → our attributes (QSEX 1/2, CENHISP 1/2 and CENRACE 01..63 become codes from 0).
PERSON_COLUMNS = {"QAGE": "AGE", "QSEX": "SEX", "CENHISP": "HISP", "CENRACE": "CENRACE"}
VOTING_AGE = Attribute("VOTING_AGE", ("under 18", "18 and over"))


class PPMFError(CensusReconError):
    """A PPMF file is missing, malformed, or lacks what a table needs."""


def _keep(chunk: pd.DataFrame, states, counties, tracts) -> pd.Series:
    keep = pd.Series(True, index=chunk.index)
    if states:
        keep &= chunk["TABBLKST"].isin(states)
    if counties:
        keep &= (chunk["TABBLKST"] + chunk["TABBLKCOU"]).isin(counties)
    if tracts:
        keep &= (chunk["TABBLKST"] + chunk["TABBLKCOU"] + chunk["TABTRACTCE"]).isin(tracts)
    return keep


def read_ppmf(path: str | Path, states: Sequence[str] | None = None, counties: Sequence[str] | None = None,
              tracts: Sequence[str] | None = None, chunksize: int = 500_000) -> Dataset:
    """Persons of a PPMF file, read ``chunksize`` rows at a time and filtered by state FIPS
    (``"01"``), county (``"01105"``) or tract (``"01105686800"``) as they stream past, so a
    15 GB national file never has to fit in memory.

    The full person format (QAGE, QSEX, CENHISP, CENRACE, ...) gives AGE, SEX, HISP, RACE and
    CENRACE with the embedded population's domains; the redistricting variant (no QAGE or
    QSEX) gives VOTING_AGE, HISP, RACE and CENRACE, and the tables that need age or sex
    cannot be built from it (the census workload says which).
    """
    path = Path(path)
    if not path.is_file():
        raise PPMFError(f"PPMF file {str(path)!r} does not exist")
    header = pd.read_csv(path, nrows=0).columns.tolist()
    missing_geo = [c for c in GEO_COLUMNS if c not in header]
    if missing_geo or "CENRACE" not in header or "CENHISP" not in header:
        raise PPMFError(f"{path} is not a PPMF person file: it lacks {missing_geo + [c for c in ('CENHISP', 'CENRACE') if c not in header]}")
    full = "QAGE" in header and "QSEX" in header
    cols = list(GEO_COLUMNS) + ["CENHISP", "CENRACE"] + (["QAGE", "QSEX"] if full else
                                                          (["VOTING_AGE"] if "VOTING_AGE" in header else []))
    parts = []
    for chunk in pd.read_csv(path, usecols=cols, dtype=str, chunksize=chunksize):
        chunk = chunk[_keep(chunk, states, counties, tracts)]
        if len(chunk):
            parts.append(chunk)
    if not parts:
        raise PPMFError(f"no persons in {path} match states={states} counties={counties} tracts={tracts}")
    df = pd.concat(parts, ignore_index=True)
    cenrace = pd.to_numeric(df["CENRACE"]).to_numpy(dtype=np.int64) - 1
    hisp = pd.to_numeric(df["CENHISP"]).to_numpy(dtype=np.int64) - 1
    if cenrace.min() < 0 or cenrace.max() > 62 or hisp.min() < 0 or hisp.max() > 1:
        raise PPMFError(f"{path}: CENRACE must be 01..63 and CENHISP 1 or 2")
    base = person_domain()
    if full:
        age = np.clip(pd.to_numeric(df["QAGE"]).to_numpy(dtype=np.int64), 0, MAX_AGE)
        sex = pd.to_numeric(df["QSEX"]).to_numpy(dtype=np.int64) - 1
        codes = np.stack([age, sex, hisp, race_group(cenrace), cenrace], axis=1)
        domain = base
    else:
        attrs = [base.attribute("HISP"), base.attribute("RACE"), base.attribute("CENRACE")]
        cols_ = [hisp, race_group(cenrace), cenrace]
        if "VOTING_AGE" in df.columns:
            attrs.insert(0, VOTING_AGE)
            cols_.insert(0, pd.to_numeric(df["VOTING_AGE"]).to_numpy(dtype=np.int64) - 1)
        domain = Domain(tuple(attrs))
        codes = np.stack(cols_, axis=1)
        log.info("%s is the redistricting PPMF (no QAGE/QSEX): tables by age or sex cannot be built", path.name)
    geo = Geography.from_parts(df["TABBLKST"], df["TABBLKCOU"], df["TABTRACTCE"], df["TABBLK"])
    return Dataset(domain, codes, geo)
