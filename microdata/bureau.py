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

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.geography import Geography, UnitCatalogue
from censusrecon.microdata.population import MAX_AGE, person_domain, race_group
from censusrecon.microdata.agreement import agreement_by_size, shares
from censusrecon.microdata.census import (AGE_BIN38_OF_AGE, AGE_BINS_38_LABELS, CENRACE_COMBOS, CensusWorkload,
                                         sf1_tables)
from censusrecon.microdata.domain import Attribute, Domain
from censusrecon.microdata.table_source import reading

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
    return AGE_BIN38_OF_AGE[np.asarray(age)]


def cenrace_of_flags(flags: np.ndarray) -> np.ndarray:
    """CENRACE codes (0..62, SF1's order) of rows of six 0/1 race flags; -1 where no flag is set.

    >>> cenrace_of_flags(np.array([[1, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0],
    ...                            [0, 0, 0, 0, 1, 1], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]])).tolist()
    [0, 1, 6, 20, 62, -1]
    """
    index = {sum(1 << i for i in combo): code for code, combo in enumerate(CENRACE_COMBOS)}
    lookup = np.full(64, -1, dtype=np.int64)
    for mask, code in index.items():
        lookup[mask] = code
    masks = (np.asarray(flags, dtype=np.int64) << np.arange(6)).sum(axis=1)
    return lookup[masks]


def _frame(path: Path) -> pd.DataFrame:
    """The file's columns as text, whatever its format (.csv or .csv.gz, or .xlsx with the `xlsx` extra)."""
    name = path.name.lower()
    suffix = ".csv" if name.endswith((".csv", ".csv.gz")) else path.suffix.lower()
    if suffix == ".xlsx":
        try:
            import openpyxl  # noqa: F401
        except ImportError:
            raise BureauFileError(f"{path}: reading .xlsx needs openpyxl: pip install 'censusrecon[xlsx]' (or save the "
                                  "sheet as CSV)") from None
        with reading(path, "Bureau extract (.xlsx)"):
            return pd.read_excel(path, dtype=str, keep_default_na=False)
    if suffix != ".csv":
        raise BureauFileError(f"{path}: a Bureau extract is .csv (or .csv.gz) or .xlsx, not "
                              f"{suffix or 'a file without extension'}")
    with reading(path, "Bureau extract (CSV)"):
        return pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")


def _block_ids(path: Path, raw: pd.Series, what: str) -> pd.Series:
    """A column of block ids as 15 digits, zero-padded where Excel dropped the leading zero; the first that is
    not a block id names the file, row (the header being row 1) and value."""
    ids = raw.str.strip()
    ok = ids.str.fullmatch(r"\d{14,15}").to_numpy()
    if not ok.all():
        i = int(np.argmax(~ok))
        raise BureauFileError(f"{path} row {i + 2}, column Block ID: {raw.iloc[i]!r} is not {what}")
    return ids.str.zfill(15)


def _shared(a: Counter, b: Counter) -> int:
    """Persons two multisets share, matched one to one."""
    return sum(min(n, b.get(k, 0)) for k, n in a.items())


def read_block_list(path: str | Path):
    """The public list of blocks (empty ones included) for an extract: a CSV with a ``Block ID`` column of
    15-digit block ids (14 where Excel dropped the leading zero), one row a block."""
    path = Path(path)
    if not path.is_file():
        raise BureauFileError(f"block list {str(path)!r} does not exist")
    with reading(path, "block list (CSV)"):
        df = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
    if "Block ID" not in df.columns:
        raise BureauFileError(f"{path}: a block list has a 'Block ID' column; it has {list(df.columns)[:6]}")
    block = _block_ids(path, df["Block ID"], "a 15-digit block id")
    if block.duplicated().any():
        raise BureauFileError(f"{path}: block {block[block.duplicated()].iloc[0]!r} is listed more than once")
    geo = Geography.census(block.to_numpy())
    return UnitCatalogue({lv: geo.ids[lv] for lv in geo.levels[1:]}, f"block list {path} (every block, empty ones "
                         "included)")


def read_bureau_extract(path: str | Path, tracts: list[str] | None = None, age: str = "binned",
                        units_file: str | Path | None = None) -> Dataset:
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

    block = _block_ids(path, df["Block ID"].str.strip().str.replace(r"\.0$", "", regex=True),  # Excel's float
                       "a 15-digit block id (14 where Excel dropped the leading zero)")
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
        ages = age_bin(ages)
        domain = Domain((Attribute("AGE", tuple(labels)), *domain.attributes[1:]))
    codes = np.stack([ages, sex.to_numpy(dtype=np.int64), flags[6], race_group(cenrace), cenrace], axis=1)
    geo = Geography.census(block.to_numpy())
    if units_file is not None:  # the public list: blocks nobody lives in included, a block with persons on it
        geo = geo.with_catalogue(read_block_list(units_file))
    return Dataset(domain, codes, geo)


# ---- the Bureau's own integer programs (recon_replication's recon/tests/*.lp) ---------------------------

#: a constraint name: _C_<table><cell>_<geography>_<index>, e.g. _C_P0120003_291650303071018_306 (P12 cell 3 of
#: that block), _C_P012A003_... (P12A cell 3), _C_PCT0120004_29165030307_410 (PCT12 cell 4 of the tract)
_CONSTRAINT = re.compile(r"^_C_(PCT|P)(\d{3})([A-Z]?)(\d{3,4})_(\d{11}|\d{15})_\d+$")
#: a variable: C_<block>_<sex>_<age group start>.0_<n>_<sex>_<age>_<six race flags>_<Hispanic>
_VARIABLE = re.compile(r"^C_(\d{15})_(male|female)_[\d.]+_\d+_(?:male|female)_(\d+)_([YN](?:_[YN]){6})$")


def _open_text(path: Path):
    import gzip

    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")


def read_lp_counts(path: str | Path) -> dict[tuple[str, int, str], int]:
    """The published counts in one of the Bureau's LP files: each constraint's name is a table cell, its
    right-hand side the 2010 count. Returns {(table, cell, geography id): count}, e.g. ("P12", 3, block)."""
    path = Path(path)
    if not path.is_file():
        raise BureauFileError(f"LP file {str(path)!r} does not exist")
    out: dict[tuple[str, int, str], int] = {}
    current = None
    with _open_text(path) as f:
        for line in f:
            text = line.strip()
            head, colon, rest = text.partition(":")
            if colon and head.startswith("_C_"):
                current = head
                text = rest
            if current is None:
                continue
            if "=" in text:  # the constraint's end: its sense and right-hand side
                rhs = text.rsplit("=", 1)[1].strip()
                m = _CONSTRAINT.match(current)
                if not m:
                    raise BureauFileError(f"{path}: constraint {current!r} is not named after a table cell")
                prefix, digits, letter, cell, geo = m.groups()
                table = f"{prefix}{int(digits)}{letter}"
                out[(table, int(cell), geo)] = int(round(float(rhs)))
                current = None
    if not out:
        raise BureauFileError(f"{path} holds no constraint named after a table cell: not one of the Bureau's programs")
    return out


def read_lp_solution(path: str | Path) -> list[tuple[str, int, int, int, int]]:
    """The persons of a Bureau solution file (.sol, a variable and its value per line): one (block id, age,
    sex, Hispanic, CENRACE) per person, repeated by the variable's value; codes as :func:`person_domain`'s."""
    path = Path(path)
    if not path.is_file():
        raise BureauFileError(f"solution file {str(path)!r} does not exist")
    rows = []
    with _open_text(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            name, value = line.split()[:2]
            n = int(round(float(value)))
            m = _VARIABLE.match(name)
            if n <= 0 or not m:
                continue
            block, sex, age, flags = m.groups()
            yn = [1 if x == "Y" else 0 for x in flags.split("_")]
            cenrace = int(cenrace_of_flags(np.array([yn[:6]]))[0])
            rows += [(block, int(age), 0 if sex == "male" else 1, yn[6], cenrace)] * n
    return rows


def compare_persons(ours: list[tuple], theirs: list[tuple]) -> list[dict]:
    """Per block: persons in each solution and those the two share as a multiset, on every field (exact
    age) and with age in SF1's 38 groups (binned)."""
    out = []
    for block in sorted({r[0] for r in ours} | {r[0] for r in theirs}):
        a = [r for r in ours if r[0] == block]
        b = [r for r in theirs if r[0] == block]

        def shared(key):
            return _shared(Counter(map(key, a)), Counter(map(key, b)))

        out.append({"block": block, "ours": len(a), "theirs": len(b), "same_exact_age": shared(lambda r: r),
                    "same_binned_age": shared(lambda r: (r[0], int(age_bin(r[1])), *r[2:]))})
    return out


def bureau_program(lp: str | Path):
    """The project's own count program for the published counts of a Bureau LP file: the SF1 tables its
    constraints name, over a domain of BLOCK (the blocks it names), single-year AGE, SEX, HISP and CENRACE.
    A cell of those tables the file does not name is 0 when it is a detail cell (the Bureau dropped the
    variables, and so the constraints, that a published zero rules out) and left free when it is a sum of
    other cells (a total the detail cells already fix). Returns (workload, counts, block ids)."""
    counts = read_lp_counts(lp)
    tables = sorted({t for t, _, _ in counts})
    known = sf1_tables()
    unknown = [t for t in tables if t not in known]
    if unknown:
        raise BureauFileError(f"{lp}: tables {unknown} are not among the SF1 tables censusrecon builds")
    blocks = sorted({g for _, _, g in counts if len(g) == 15})
    base = person_domain()
    domain = Domain((Attribute("BLOCK", tuple(blocks)), base.attribute("AGE"), base.attribute("SEX"),
                     base.attribute("HISP"), base.attribute("CENRACE")))
    size = dict(zip(domain.names, domain.sizes))

    def full(c) -> dict:
        sets = c.attrs()
        return {a: frozenset(v for v in sets.get(a, range(n)) if v < n) for a, n in size.items() if a != "BLOCK"}

    def inside(a: dict, b: dict) -> bool:
        return all(a[k] <= b[k] for k in a)

    cells, value = [], {}
    for t in tables:
        table_cells = known[t]
        sets = [full(c) for c in table_cells]
        for c, s in zip(table_cells, sets):
            aggregate = any(o is not s and inside(o, s) and o != s for o in sets)
            places = blocks if c.level == "block" else [lp_tract(counts)]
            named = [(t, c.number, g) in counts for g in places]
            if aggregate and not any(named):
                continue  # a total the detail cells fix: not named, left free
            cells.append(c)
            for g in places:
                value[(c.name, g)] = counts.get((t, c.number, g), 0)
    w = CensusWorkload.build(domain, cells)
    vec = np.array([value[(label.split("@")[0], label.split("@")[1] if "@" in label else lp_tract(counts))]
                    for label in w.labels], dtype=np.int64)
    return w, vec, blocks


def lp_tract(counts: dict) -> str:
    """The tract of an LP file's counts: the 11-digit id its tract cells name, or its blocks' first 11 digits."""
    tracts = {g for _, _, g in counts if len(g) == 11} or {g[:11] for _, _, g in counts}
    if len(tracts) != 1:
        raise BureauFileError(f"an LP file of one tract was expected, these name {sorted(tracts)}")
    return next(iter(tracts))


def agreement_by_block_size(truth: Dataset, other: Dataset) -> list[dict]:
    """The Bureau's agreement of ``other``'s persons with ``truth``'s (HDSR 2025): persons of ``truth``
    matched one to one, within their block, by a person of ``other`` with the same sex, race, Hispanic origin
    and age (exact: the same single year; binned: the same SF1 age group), per class of the block's size in
    ``truth`` (1-9, 10-49, 50-99, 100+ persons) and overall, as shares (:mod:`microdata.agreement`). Both
    need single-year AGE (``age="single"``) for the exact figure; on binned AGE only the binned one is given
    (``exact`` None)."""
    binned_only = truth.domain.attribute("AGE").values == AGE_BINS_38_LABELS
    if (other.domain.attribute("AGE").values == AGE_BINS_38_LABELS) != binned_only:
        raise BureauFileError("agreement compares files read with the same data.age (binned or single)")
    cols = [truth.domain.index(a) for a in ("AGE", "SEX", "HISP", "CENRACE")]
    ids = {b: i for i, b in enumerate(sorted(set(truth.geography.units("block").tolist())
                                             | set(other.geography.units("block").tolist())))}

    def codes(data: Dataset) -> np.ndarray:
        block = np.array([ids[b] for b in data.geography.units("block").tolist()], dtype=np.int64)
        return np.column_stack([block, data.codes[:, cols]]) if len(block) else np.zeros((0, 5), np.int64)

    rows = agreement_by_size(codes(truth), codes(other), 0, 1, None if binned_only else AGE_BIN38_OF_AGE)
    return [{k: r[k] for k in ("block_size", "persons", "binned", "exact")} for r in shares(rows)]
