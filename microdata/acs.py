"""American Community Survey person records: the NIST excerpt format and folktables' ACS files."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Attribute, Domain
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.geography import Geography
from censusrecon.microdata.table_source import reading

log = logging.getLogger(__name__)

NULL = "N/A"
#: Default equal-width bin bounds for ACS numeric columns (values outside go to the end bins).
DEFAULT_BOUNDS: dict[str, tuple[float, float]] = {
    "AGEP": (0.0, 100.0),
    "PINCP": (-10_000.0, 200_000.0),
    "WKHP": (0.0, 99.0),
    "JWMNP": (0.0, 200.0),
    "POVPIP": (0.0, 500.0),
    "DENSITY": (0.0, 55_000.0),
}
def _codes(lo: int, hi: int) -> tuple[str, ...]:
    return tuple(str(v) for v in range(lo, hi + 1))


#: The ACS PUMS data dictionary's codes for every categorical column the folktables tasks read
#: (2018 1-year dictionary), and whether the column has a blank "N/A" code there: the domain of
#: each attribute is this list (plus N/A where the dictionary allows it), whatever values a file
#: holds, so that adding or removing one person never changes a table's shape. From 2019 the
#: PUMS calls RELP ``RELSHIPP`` with codes 20-38 (:data:`RELSHIPP_CODES`).
PUMS_CATEGORIES: dict[str, tuple[tuple[str, ...], bool]] = {
    "SCHL": (_codes(1, 24), True),      # N/A: under 3 years old
    "MAR": (_codes(1, 5), False),
    "RELP": (_codes(0, 17), False),
    "DIS": (_codes(1, 2), False),
    "ESP": (_codes(1, 8), True),        # N/A: not an own child of the householder
    "CIT": (_codes(1, 5), False),
    "MIG": (_codes(1, 3), True),        # N/A: under 1 year old
    "MIL": (_codes(1, 4), True),        # N/A: under 17 years old
    "ANC": (("1", "2", "3", "4", "8"), False),
    "NATIVITY": (_codes(1, 2), False),
    "DEAR": (_codes(1, 2), False),
    "DEYE": (_codes(1, 2), False),
    "DREM": (_codes(1, 2), True),       # N/A: under 5 years old
    "SEX": (_codes(1, 2), False),
    "RAC1P": (_codes(1, 9), False),
    "ESR": (_codes(1, 6), True),        # N/A: under 16 years old
    "FER": (_codes(1, 2), True),
    "PUBCOV": (_codes(1, 2), False),
    "GCL": (_codes(1, 2), True),
    "COW": (_codes(1, 9), True),
}
#: RELP's codes in the 2019 and later dictionaries (there named RELSHIPP).
RELSHIPP_CODES = _codes(20, 38)
#: The PUMS numeric columns the folktables tasks bin, and whether they have an N/A code.
PUMS_NUMERIC_NULLABLE = {"AGEP": False, "PINCP": True, "WKHP": True, "JWMNP": True}

#: The paper's folktables tasks and folktables' names for them.
TASKS = {"employment": "ACSEmployment", "coverage": "ACSPublicCoverage", "mobility": "ACSMobility"}
#: State postal codes to FIPS (the 50 states, DC and Puerto Rico).
STATE_FIPS = {
    "AL": "01", "AK": "02", "AZ": "04", "AR": "05", "CA": "06", "CO": "08", "CT": "09", "DE": "10",
    "DC": "11", "FL": "12", "GA": "13", "HI": "15", "ID": "16", "IL": "17", "IN": "18", "IA": "19",
    "KS": "20", "KY": "21", "LA": "22", "ME": "23", "MD": "24", "MA": "25", "MI": "26", "MN": "27",
    "MS": "28", "MO": "29", "MT": "30", "NE": "31", "NV": "32", "NH": "33", "NJ": "34", "NM": "35",
    "NY": "36", "NC": "37", "ND": "38", "OH": "39", "OK": "40", "OR": "41", "PA": "42", "RI": "44",
    "SC": "45", "SD": "46", "TN": "47", "TX": "48", "UT": "49", "VT": "50", "VA": "51", "WA": "53",
    "WV": "54", "WI": "55", "WY": "56", "PR": "72",
}


class ACSDataError(CensusReconError):
    """An ACS file, column or value is missing or malformed; the message names it."""


@dataclass(frozen=True)
class Binning:
    """``bins`` equal-width bins over [low, high]; values below/above land in the end bins.

    >>> Binning(0, 100, 10).labels()[:2]
    ('[0, 10)', '[10, 20)')
    """

    low: float
    high: float
    bins: int = 10

    def __post_init__(self) -> None:
        if not self.high > self.low or self.bins < 1:
            raise ACSDataError(f"bins need high > low and at least one bin, got {self}")

    def edges(self) -> np.ndarray:
        return np.linspace(self.low, self.high, self.bins + 1)

    def labels(self) -> tuple[str, ...]:
        e = self.edges()
        fmt = (lambda v: f"{v:g}")
        return tuple(f"[{fmt(a)}, {fmt(b)})" for a, b in zip(e[:-1], e[1:]))

    def codes(self, values: np.ndarray) -> np.ndarray:
        width = (self.high - self.low) / self.bins
        return np.clip(np.floor((values - self.low) / width), 0, self.bins - 1).astype(np.int64)


def encode_columns(df: pd.DataFrame, columns: Sequence[str], binning: Mapping[str, Binning],
                   categories: Mapping[str, Sequence[str]], nullable: Mapping[str, bool],
                   source: str = "data") -> tuple[Domain, np.ndarray]:
    """Integer-code ``columns`` of a frame whose nulls are NaN/None, over declared domains only.

    Binned columns become ``binning[c].bins`` bins; other columns are categorical over the
    declared ``categories[c]``. ``"N/A"`` is the last category of every column whose
    ``nullable[c]`` is true, whether or not anyone's value is null. The domain never depends on
    the values present: a value outside it, a null where none is declared, or a column with no
    declared domain is an error naming the file, row, column and value.
    """
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ACSDataError(f"{source} lacks columns {missing}; it has {sorted(map(str, df.columns))}")
    attrs, cols = [], []
    for c in columns:
        s = df[c]
        null = s.isna().to_numpy()
        if c not in binning and c not in categories:
            raise ACSDataError(f"{source}, column {c}: no declared domain (neither listed codes nor a numeric range); "
                               "a domain is never taken from the values present")
        if null.any() and not nullable.get(c, False):
            i = int(np.argmax(null))
            raise ACSDataError(f"{source} row {i + 2}, column {c}: a null value, but the column's declared domain has no "
                               "N/A code")
        if c in binning:
            b = binning[c]
            vals = pd.to_numeric(s, errors="coerce")
            bad = vals.isna().to_numpy() & ~null
            if bad.any():
                i = int(np.argmax(bad))
                raise ACSDataError(f"{source} row {i + 2}, column {c}: {s.iloc[i]!r} is not a number (nor the null "
                                   "marker)")
            labels = list(b.labels())
            code = b.codes(vals.fillna(b.low).to_numpy(dtype=np.float64))
        else:
            text = s.astype(str).where(~null, NULL).str.replace(r"\.0$", "", regex=True)
            labels = [str(v) for v in categories[c] if str(v) != NULL]
            unknown = ~text.isin(labels).to_numpy() & ~null
            if unknown.any():
                i = int(np.argmax(unknown))
                raise ACSDataError(f"{source} row {i + 2}, column {c}: {text.iloc[i]!r} is not one of the values its "
                                   f"dictionary lists ({', '.join(labels[:8])}{', ...' if len(labels) > 8 else ''})")
            lookup = {v: i for i, v in enumerate(labels)}
            code = text.map(lookup).fillna(-1).to_numpy(dtype=np.int64)
        if nullable.get(c, False):
            code = np.where(null, len(labels), code)
            labels = labels + [NULL]
        attrs.append(Attribute(c, tuple(labels)))
        cols.append(code)
    codes = np.stack(cols, axis=1) if cols else np.zeros((len(df), 0), np.int64)
    return Domain(tuple(attrs)), codes


def _puma_geography(state: pd.Series, puma: pd.Series) -> Geography:
    st = state.astype(str).str.zfill(2).to_numpy()
    pu = np.char.add(np.char.add(st, "-"), puma.astype(str).str.zfill(5).to_numpy())
    return Geography.from_levels({"state": st, "puma": pu})


def _binning(columns: Sequence[str], bounds: Mapping[str, Sequence[float]] | None, bins: int,
             numeric: set[str]) -> dict[str, Binning]:
    given = dict(bounds or {})
    out = {}
    for c in columns:
        if c in given:
            lo, hi = given[c]
            out[c] = Binning(float(lo), float(hi), bins)
        elif c in numeric:
            lo, hi = DEFAULT_BOUNDS[c]
            out[c] = Binning(lo, hi, bins)
    return out


# ---- the NIST excerpt format ----------------------------------------------------------------


def read_nist(path: str | Path, attributes: Sequence[str] | None = None,
              bounds: Mapping[str, Sequence[float]] | None = None, bins: int = 10,
              dictionary: str | Path | None = None) -> Dataset:
    """Read a NIST ACS excerpt CSV (``N`` marks a null, PUMA as ``SS-PPPPP``).

    Domains come from the JSON data dictionary (``data_dictionary.json`` beside the file
    unless given), never from the values present: listed codes are the categories, and N/A is
    one whenever the dictionary lists the null marker ``N``; columns the dictionary gives as a
    min/max range are binned (``bounds`` per column, else the defaults in ``DEFAULT_BOUNDS``)
    or, for small integer ranges, enumerated. A column the dictionary gives no codes or range
    for is an error.
    Geography: PUMA inside its state inside the nation.
    """
    path = Path(path)
    if not path.is_file():
        raise ACSDataError(f"NIST ACS file {str(path)!r} does not exist")
    dict_path = Path(dictionary) if dictionary else path.with_name("data_dictionary.json")
    if not dict_path.is_file():
        raise ACSDataError(f"data dictionary {str(dict_path)!r} does not exist (expected beside {path.name})")

    try:
        spec = json.loads(dict_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ACSDataError(f"{dict_path}: not a JSON data dictionary ({type(e).__name__}: {e})") from None
    if not isinstance(spec, dict) or not all(isinstance(v, dict) for v in spec.values()):
        raise ACSDataError(f"{dict_path}: a data dictionary maps each column to its description and values")
    with reading(path, "NIST ACS excerpt (CSV)"):
        df = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=["N"], encoding="utf-8")
    if len(df) == 0:
        raise ACSDataError(f"{path} has a header but no persons")
    if "PUMA" not in df.columns:
        raise ACSDataError(f"{path} has no PUMA column; columns are {list(df.columns)}")
    puma = df["PUMA"].astype(str)
    ok = puma.str.fullmatch(r"\d{2}-\d{5}")
    if not ok.all():
        raise ACSDataError(f"{path}: PUMA must look like SS-PPPPP, got {puma[~ok].iloc[0]!r}")
    skip = {"PUMA", "PWGTP", "WGTP", "INDP"}
    attributes = list(attributes) if attributes is not None else [c for c in df.columns if c not in skip]
    unknown = [c for c in attributes if c not in spec]
    if unknown:
        raise ACSDataError(f"columns {unknown} are not in the data dictionary {dict_path.name}")
    categories, numeric, nullable = {}, set(), {}
    for c in attributes:
        values = spec[c].get("values", {})
        nullable[c] = "N" in values  # the dictionary lists the null marker: N/A is a category
        listed = [k for k in values if k not in ("min", "max", "N")]  # "N" is the null marker
        if "min" in values and "max" in values:
            lo, hi = values["min"], values["max"]
            if c in (bounds or {}) or c in DEFAULT_BOUNDS or not float(lo).is_integer() or hi - lo > 30:
                if c not in (bounds or {}) and c not in DEFAULT_BOUNDS:
                    raise ACSDataError(f"column {c!r} is numeric ({lo}..{hi}); give its bin bounds (data.bounds.{c})")
                numeric.add(c)
                if listed:  # codes beside the range (POVPIP's 501) fall in the top bin
                    log.info("%s: listed codes %s are binned with the range", c, listed)
                continue
            listed = listed + [str(v) for v in range(int(lo), int(hi) + 1)]
        if listed:
            categories[c] = listed
    binning = _binning(attributes, bounds, bins, numeric)
    domain, codes = encode_columns(df, attributes, binning, categories, nullable, source=str(path))
    return Dataset(domain, codes, _puma_geography(puma.str[:2], puma.str[3:]))


# ---- folktables --------------------------------------------------------------------------------


def folktables_problem(task: str):
    """folktables' definition of the employment, coverage or mobility task."""
    if task not in TASKS:
        raise ACSDataError(f"unknown ACS task {task!r}; choose from {sorted(TASKS)}")
    try:
        import folktables
    except ImportError:
        raise ACSDataError("folktables is not installed: pip install 'censusrecon[acs]'") from None
    return getattr(folktables, TASKS[task])


def read_folktables(root: str | Path, states: Sequence[str], task: str, year: int = 2018,
                    horizon: str = "1-Year", include_target: bool = True,
                    bounds: Mapping[str, Sequence[float]] | None = None, bins: int = 10,
                    download: bool = False) -> Dataset:
    """ACS person records for ``task`` through folktables' ``ACSDataSource`` over ``root``.

    Files are read from ``root/<year>/<horizon>/psam_p<FIPS>.csv`` and downloaded only when
    ``download`` is true. The task's features (and its target, transformed as folktables
    defines it, when ``include_target``) after the task's row filter; AGEP, PINCP, WKHP and
    JWMNP binned; every other column's categories are the data dictionary's codes
    (:data:`PUMS_CATEGORIES`, N/A where the dictionary has a blank code), never the values
    present. From 2019 on the PUMS calls RELP ``RELSHIPP`` (codes 20-38); it is renamed back so
    the task's feature list applies.
    """
    problem = folktables_problem(task)
    from folktables import ACSDataSource

    root = Path(root)
    states = [s.upper() for s in states]
    bad = [s for s in states if s not in STATE_FIPS]
    if bad or not states:
        raise ACSDataError(f"unknown state codes {bad or states}; use postal codes such as CA, NY, TX")
    if not download:
        for s in states:
            f = root / str(year) / horizon / f"psam_p{STATE_FIPS[s]}.csv"
            if not f.is_file():
                raise ACSDataError(
                    f"ACS file {str(f)!r} for {s} is missing; expected the layout "
                    f"root/<year>/<horizon>/psam_p<FIPS>.csv (or set data.download: true)"
                )

    source = ACSDataSource(survey_year=str(year), horizon=horizon, survey="person", root_dir=str(root))
    files = root / str(year) / horizon
    with reading(files, f"folder of ACS PUMS person files (psam_p<FIPS>.csv for {', '.join(states)})"):
        df = source.get_data(states=states, download=download)
    if "RELP" not in df.columns and "RELSHIPP" in df.columns:
        df = df.rename(columns={"RELSHIPP": "RELP"})
    needed = [*problem.features, problem.target, "ST", "PUMA"]
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise ACSDataError(f"ACS {year} {horizon} files under {root} lack columns {missing}")
    pre = getattr(problem, "_preprocess", None)  # the task's row filter, as folktables defines it
    if pre is not None:
        df = pre(df)
    df = df.reset_index(drop=True)
    columns = list(problem.features)
    if include_target:
        t = problem.target
        df[t] = np.asarray(problem.target_transform(df[t])).astype(bool)  # folktables' label, as it defines it
        columns.append(t)
    columns = [c for c in columns if c != "ST"]  # the state is geography, not an attribute
    binning = _binning(columns, bounds, bins, {c for c in PUMS_NUMERIC_NULLABLE if c in columns})
    categories = {c: codes for c, (codes, _) in PUMS_CATEGORIES.items()}
    nullable = {c: n for c, (_, n) in PUMS_CATEGORIES.items()} | PUMS_NUMERIC_NULLABLE
    if year >= 2019:
        categories["RELP"] = RELSHIPP_CODES
    if include_target:
        categories[problem.target] = ("False", "True")  # folktables' label
        nullable[problem.target] = False
    domain, codes = encode_columns(df, columns, binning, categories, nullable,
                                   source=f"ACS {year} {horizon} {','.join(states)}")
    return Dataset(domain, codes, _puma_geography(df["ST"], df["PUMA"]))
