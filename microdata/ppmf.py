"""Reader for the 2010 demonstration Privacy-Protected Microdata Files (person), in chunks with geographic filters."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Attribute, Domain
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.geography import Geography
from censusrecon.microdata.population import MAX_AGE, person_domain, race_group

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
    cannot be built from it (the census workload says which). Every value is checked (QAGE
    0..115, QSEX 1 or 2, CENHISP 1 or 2, CENRACE 01..63, VOTING_AGE 1 or 2, geography codes of
    2, 3, 6 and 4 digits); the first that is not names the file, row, column and value.
    """
    from censusrecon.microdata.table_source import reading

    path = Path(path)
    if not path.is_file():
        raise PPMFError(f"PPMF file {str(path)!r} does not exist")
    with reading(path, "PPMF person file (CSV)"):
        header = pd.read_csv(path, nrows=0, encoding="utf-8").columns.tolist()
    specs = _column_specs(path, header)
    codes, geo_df = _read_rows(path, specs, (states, counties, tracts), chunksize)
    domain, codes = _ppmf_domain(path, header, codes)
    geo = Geography.from_parts(geo_df["TABBLKST"], geo_df["TABBLKCOU"], geo_df["TABTRACTCE"], geo_df["TABBLK"])
    return Dataset(domain, codes, geo)


def _column_specs(path: Path, header: list[str]) -> list:
    """The columns read and their codes: the full person format's QAGE and QSEX where it has them, the
    redistricting variant's VOTING_AGE where it has that, CENHISP and CENRACE always."""
    from censusrecon.microdata.table_source import ColumnSpec

    missing_geo = [c for c in GEO_COLUMNS if c not in header]
    if missing_geo or "CENRACE" not in header or "CENHISP" not in header:
        raise PPMFError(f"{path} is not a PPMF person file: it lacks "
                        f"{missing_geo + [c for c in ('CENHISP', 'CENRACE') if c not in header]}")
    full = "QAGE" in header and "QSEX" in header
    specs = [ColumnSpec("HISP", "CENHISP", ("1", "2")),
             ColumnSpec("CENRACE", "CENRACE", tuple(f"{i:02d}" for i in range(1, 64)))]
    if full:
        specs = [ColumnSpec("AGE", "QAGE", range=(0, MAX_AGE)), ColumnSpec("SEX", "QSEX", ("1", "2"))] + specs
    elif "VOTING_AGE" in header:
        specs = [ColumnSpec("VOTING_AGE", "VOTING_AGE", ("1", "2"))] + specs
    return specs


def _read_rows(path: Path, specs: list, where_kept: tuple, chunksize: int) -> tuple[np.ndarray, pd.DataFrame]:
    """Every kept row's codes and geography, ``chunksize`` rows at a time, kept by ``where_kept`` (states, counties,
    tracts) as they stream past; every value checked (the first that is not a code names the file, row and column)."""
    from censusrecon.microdata.table_source import reading

    states, counties, tracts = where_kept
    widths = dict(zip(GEO_COLUMNS, (2, 3, 6, 4)))
    cols = list(GEO_COLUMNS) + [s.column for s in specs]
    parts, geo_parts, kept = [], [], 0
    row = 2
    with reading(path, "PPMF person file (CSV)"):
        for chunk in pd.read_csv(path, usecols=cols, dtype=str, keep_default_na=False, chunksize=chunksize,
                                 encoding="utf-8"):
            first, row = row, row + len(chunk)
            chunk = chunk.fillna("")  # a short row's missing fields
            keep = _keep(chunk, states, counties, tracts).to_numpy()
            chunk = chunk[keep]
            if not len(chunk):
                continue
            lines = first + np.flatnonzero(keep)

            def where(i, lines=lines):
                return f"{path} row {lines[i]}"

            for c, w in widths.items():
                code = chunk[c].str.strip()
                bad = ~(code.str.fullmatch(r"\d+") & (code.str.len() == w)).to_numpy()
                if bad.any():
                    i = int(np.argmax(bad))
                    raise PPMFError(f"{where(i)}, column {c}: {chunk[c].iloc[i]!r} is not a {w}-digit code")
            codes = [s.encode(chunk[s.column], where) for s in specs]
            parts.append(np.stack(codes, axis=1))
            geo_parts.append(chunk[list(GEO_COLUMNS)])
            kept += len(chunk)
    if not kept:
        if row == 2:
            raise PPMFError(f"{path} has a header but no persons")
        raise PPMFError(f"no persons in {path} match states={states} counties={counties} tracts={tracts} "
                        f"({row - 2} rows read)")
    return np.concatenate(parts), pd.concat(geo_parts, ignore_index=True)


def _ppmf_domain(path: Path, header: list[str], codes: np.ndarray) -> tuple[Domain, np.ndarray]:
    """The full format's AGE, SEX, HISP, RACE and CENRACE (RACE the CENRACE group), or the redistricting variant's
    (VOTING_AGE,) HISP, RACE and CENRACE, with their codes in that order."""
    base = person_domain()
    if "QAGE" in header and "QSEX" in header:  # AGE, SEX, HISP, CENRACE -> AGE, SEX, HISP, RACE, CENRACE
        codes = np.stack([codes[:, 0], codes[:, 1], codes[:, 2], race_group(codes[:, 3]), codes[:, 3]], axis=1)
        domain = base
    else:
        attrs = [base.attribute("HISP"), base.attribute("RACE"), base.attribute("CENRACE")]
        cenrace, hisp = codes[:, -1], codes[:, -2]
        cols_ = [hisp, race_group(cenrace), cenrace]
        if "VOTING_AGE" in header:
            attrs.insert(0, VOTING_AGE)
            cols_.insert(0, codes[:, 0])
        domain = Domain(tuple(attrs))
        codes = np.stack(cols_, axis=1)
        log.info("%s is the redistricting PPMF (no QAGE/QSEX): tables by age or sex cannot be built", path.name)
    return domain, codes
