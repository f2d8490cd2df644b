"""Reader for the Census Bureau's 2010 reconstruction extracts, in the format its replication archive
publishes them (uscensusbureau/recon_replication, ``extract/provided/*.xlsx``; Abowd et al., HDSR 2025).

One row per person: ``RowID, Block ID, Sex, Age, Binned Age, White, Black, American Indian or Alaskan
Native, Asian, Native Hawaiian or Pacific Island, Some Other Race, Hispanic, BSAb Unique, BSAbER
Unique``. ``Block ID`` is the 15-digit block code (state 2, county 3, tract 6, block 4); Excel stored
it as a number, so a state 01–09 id arrives with 14 digits and is zero-padded back. The six race flags
(Y/N) are the person's race combination, CENRACE's 63 codes in SF1's order; ``Binned Age`` is one of
SF1's 38 age groups and must hold ``Age``.

What the rows are: on {block, sex, 38-bin age, race, Hispanic} the Bureau's reconstruction of the
published 2010 tables for tracts whose every block has solution variability 0 (exactly one multiset of
those rows fits the published tables), i.e. the 2010 detail file behind them; single-year age is one
feasible value, not necessarily the true one. The DAS counterpart (``rmdf``) is the same tracts
reconstructed from the 2020 DAS run on the 2010 data: a real differentially private release of the
same persons.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from microdata.dataset import Dataset
from microdata.errors import CensusReconError
from microdata.geography import Geography
from microdata.population import MAX_AGE, person_domain, race_group

#: the published columns, in order; the two uniqueness flags are the Bureau's and not read
RACE_FLAGS = ("White", "Black", "American Indian or Alaskan Native", "Asian", "Native Hawaiian or Pacific Island",
              "Some Other Race")
COLUMNS = ("Block ID", "Sex", "Age", "Binned Age", *RACE_FLAGS, "Hispanic")
class BureauFileError(CensusReconError):
    """A Bureau extract is missing, malformed, or not in the published format."""


def age_bin(age: np.ndarray) -> np.ndarray:
    """The index (0..37) of SF1's age group of each single year of age.

    >>> age_bin(np.array([0, 21, 22, 24, 25, 61, 62, 85, 104])).tolist()
    [0, 21, 22, 22, 23, 30, 31, 37, 37]
    """
    from microdata.census import AGE_BIN38_OF_AGE

    return AGE_BIN38_OF_AGE[np.asarray(age)]


def cenrace_of_flags(flags: np.ndarray) -> np.ndarray:
    """CENRACE codes (0..62, SF1's order) of rows of six 0/1 race flags; -1 where no flag is set.

    >>> cenrace_of_flags(np.array([[1, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0],
    ...                            [0, 0, 0, 0, 1, 1], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]])).tolist()
    [0, 1, 6, 20, 62, -1]
    """
    from microdata.census import CENRACE_COMBOS

    index = {sum(1 << i for i in combo): code for code, combo in enumerate(CENRACE_COMBOS)}
    lookup = np.full(64, -1, dtype=np.int64)
    for mask, code in index.items():
        lookup[mask] = code
    masks = (np.asarray(flags, dtype=np.int64) << np.arange(6)).sum(axis=1)
    return lookup[masks]


def _frame(path: Path) -> pd.DataFrame:
    """The file's columns as text, whatever its format (.csv, or .xlsx with the `xlsx` extra)."""
    from microdata.table_source import reading

    suffix = path.suffix.lower()
    if suffix == ".xlsx":
        try:
            import openpyxl  # noqa: F401
        except ImportError:
            raise BureauFileError(f"{path}: reading .xlsx needs openpyxl: pip install 'censusrecon[xlsx]' (or save the "
                                  "sheet as CSV)") from None
        with reading(path, "Bureau extract (.xlsx)"):
            return pd.read_excel(path, dtype=str, keep_default_na=False)
    if suffix != ".csv":
        raise BureauFileError(f"{path}: a Bureau extract is .csv or .xlsx, not {suffix or 'a file without extension'}")
    with reading(path, "Bureau extract (CSV)"):
        return pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")


def read_bureau_extract(path: str | Path, tracts: list[str] | None = None, age: str = "binned") -> Dataset:
    """Every person of a Bureau extract (optionally of some tracts: 11-digit ids), with AGE, SEX, HISP, RACE and
    CENRACE and the census geography from the block ids. AGE is SF1's 38 age groups (``age="binned"``, the
    default: the extract is exact on them, its single year is one feasible value, not the true one) or the
    single year (``age="single"``). Every value is checked; the first that is not as published names the
    file, row (as a spreadsheet numbers it, the header being row 1), column and value."""
    if age not in ("binned", "single"):
        raise BureauFileError(f"data.age must be binned or single, got {age!r}")
    path = Path(path)
    if not path.is_file():
        raise BureauFileError(f"Bureau extract {str(path)!r} does not exist")
    df = _frame(path)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise BureauFileError(f"{path} is not a Bureau extract in the published format: it lacks columns {missing}")
    if not len(df):
        raise BureauFileError(f"{path} has a header but no persons")

    def bad(mask: np.ndarray, column: str, what: str):
        i = int(np.argmax(mask))
        raise BureauFileError(f"{path} row {i + 2}, column {column}: {df[column].iloc[i]!r} is not {what}")

    block = df["Block ID"].str.strip().str.replace(r"\.0$", "", regex=True)  # a number Excel wrote as float
    digits = block.str.fullmatch(r"\d{14,15}").to_numpy()
    if not digits.all():
        bad(~digits, "Block ID", "a 15-digit block id (14 where Excel dropped the leading zero)")
    block = block.str.zfill(15)
    if tracts:
        keep = block.str[:11].isin(list(tracts)).to_numpy()
        if not keep.any():
            raise BureauFileError(f"no persons in {path} are in tracts {list(tracts)} "
                                  f"(it has {sorted(block.str[:11].unique())[:5]} ...)")
        df, block = df[keep].reset_index(drop=True), block[keep].reset_index(drop=True)
    sex_text = df["Sex"].str.strip().str.lower()
    sex = sex_text.map({"male": 0, "female": 1})
    if sex.isna().any():
        bad(sex.isna().to_numpy(), "Sex", "male or female")
    years = pd.to_numeric(df["Age"].str.strip(), errors="coerce")
    ok = years.notna() & (years == years.round()) & (years >= 0) & (years <= MAX_AGE)
    if not ok.all():
        bad(~ok.to_numpy(), "Age", f"an integer in [0, {MAX_AGE}]")
    ages = years.to_numpy(dtype=np.int64)
    from microdata.census import AGE_BINS_38_LABELS

    labels = np.array(AGE_BINS_38_LABELS)
    held = df["Binned Age"].str.strip().str.replace(r"\s*-\s*", " - ", regex=True).to_numpy() == labels[age_bin(ages)]
    if not held.all():
        i = int(np.argmax(~held))
        raise BureauFileError(f"{path} row {i + 2}, column Binned Age: {df['Binned Age'].iloc[i]!r} is not the SF1 age "
                              f"group of Age {ages[i]} ({labels[age_bin(ages)][i]!r})")
    yn = {"Y": 1, "N": 0}
    flags = []
    for c in (*RACE_FLAGS, "Hispanic"):
        v = df[c].str.strip().str.upper().map(yn)
        if v.isna().any():
            bad(v.isna().to_numpy(), c, "Y or N")
        flags.append(v.to_numpy(dtype=np.int64))
    cenrace = cenrace_of_flags(np.stack(flags[:6], axis=1))
    if (cenrace < 0).any():
        bad(cenrace < 0, "White", "a race: every race flag of this row is N")
    domain = person_domain()
    if age == "binned":  # the 38 groups in place of the single year
        from microdata.domain import Attribute, Domain

        ages = age_bin(ages)
        domain = Domain((Attribute("AGE", tuple(labels)), *domain.attributes[1:]))
    codes = np.stack([ages, sex.to_numpy(dtype=np.int64), flags[6], race_group(cenrace), cenrace], axis=1)
    geo = Geography.from_parts(block.str[:2], block.str[2:5], block.str[5:11], block.str[11:15])
    return Dataset(domain, codes, geo)
