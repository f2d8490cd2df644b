"""The program contract's command line, for adapters run in an environment of their own: parse the
arguments censusrecon passes, read the inputs, call ``release`` and save its array. Imports nothing
of censusrecon (only numpy and pandas), so an adapter's environment needs nothing else of ours.

Also the two computations every tables adapter needs and the contract leaves to it: the true
counts of the cells, and the most cells one person can be counted in (from the public domain
only, never from the persons)."""

from __future__ import annotations

import argparse
import itertools
import json

import numpy as np
import pandas as pd


def _job(release, a: dict) -> None:
    persons, cells = pd.read_parquet(a["persons"]), pd.read_parquet(a["cells"])
    with open(a["domain"]) as fh:
        domain = json.load(fh)
    cells = cells.astype(object).where(cells.notna(), None)
    for col in domain["attributes"]:  # parquet gives lists back as arrays
        cells[col] = [None if v is None else [str(x) for x in v] for v in cells[col]]
    out = release(persons, cells, domain, float(a["epsilon"]), int(a["runs"]), int(a["seed"]), a["relation"],
                  **json.loads(a.get("params") or "{}"))
    np.save(a["out"], np.asarray(out, dtype=np.float64))


def serve(release) -> None:
    """One job from the command line (``--persons ... --out``), or with ``--serve`` one per line of
    standard input (a JSON object of the same keys), answering each with a line "ok" or "error: why"
    on standard output, so that a library slow to start (Spark) starts once; anything the library
    itself prints goes to standard error."""
    import sys

    ap = argparse.ArgumentParser(description="a censusrecon release program")
    ap.add_argument("--serve", action="store_true", help="take jobs as JSON lines on standard input")
    for name in ("persons", "cells", "domain", "relation", "params", "out", "epsilon", "runs", "seed"):
        ap.add_argument(f"--{name}", default="{}" if name == "params" else None)
    a = ap.parse_args()
    if not a.serve:
        missing = [k for k, v in vars(a).items() if v is None]
        if missing:
            ap.error(f"missing {', '.join('--' + m for m in missing)}")
        _job(release, vars(a))
        return
    answer, sys.stdout = sys.stdout, sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            _job(release, json.loads(line))
            answer.write("ok\n")
        except Exception as e:  # the job's failure, one line; the worker serves the next
            answer.write("error: " + (f"{type(e).__name__}: {e}".splitlines() or ["?"])[0] + "\n")
        answer.flush()


def _members(allowed, labels) -> np.ndarray:
    """(cells × labels): whether each label is among each cell's allowed values (None: all of them). Cells
    share a handful of value sets, so each distinct set is tested once."""
    labels = list(labels)
    seen: dict = {}
    rows = []
    for s in allowed:
        key = None if s is None else tuple(s)
        if key not in seen:
            seen[key] = np.ones(len(labels), dtype=bool) if s is None else np.isin(labels, list(s))
        rows.append(seen[key])
    return np.array(rows, dtype=bool).reshape(len(rows), len(labels))


def true_counts(persons: pd.DataFrame, cells: pd.DataFrame, attributes: list[str]) -> np.ndarray:
    """Each cell's count of persons: those at the cell's geography with every listed attribute value."""
    out = np.zeros(len(cells), dtype=np.int64)
    codes = {}
    for a in attributes:  # each person's value as a position among the values persons have
        codes[a] = np.unique(persons[a].astype(str).to_numpy(), return_inverse=True)
    member = {a: _members(cells[a].to_numpy(), codes[a][0]) for a in attributes}  # every cell × value, once
    for (level, geo), idx in cells.groupby(["level", "geography"], sort=False).groups.items():
        here = (persons[level if level != "unit" else "unit"] == geo).to_numpy()
        rows = cells.index.get_indexer(idx)
        hit = np.ones((len(rows), int(here.sum())), dtype=bool)
        for a in attributes:
            hit &= member[a][rows][:, codes[a][1][here]]
        out[rows] = hit.sum(axis=1)
    return out


def most_cells_per_person(cells: pd.DataFrame, domain: dict) -> int:
    """The most cells one person is counted in, over every place of the public domain and every
    combination of attribute values (the L1 sensitivity of the counts under add/remove)."""
    attrs = domain["attributes"]
    names = list(attrs)
    grids = np.array(list(itertools.product(*[range(len(attrs[a])) for a in names])), dtype=np.int64)
    hit = np.ones((len(cells), len(grids)), dtype=bool)  # cell × combination of values: counted there
    for j, a in enumerate(names):
        hit &= _members(cells[a].to_numpy(), attrs[a])[:, grids[:, j]]
    where: dict = {}  # (level, geography) -> the cells published there
    for i, key in enumerate(zip(cells["level"], cells["geography"])):
        where.setdefault(key, []).append(i)
    best = 0
    for place in domain["places"]:
        mine = [i for lv, g in [("unit", place["unit"])] + [(lv, g) for lv, g in place.items() if lv != "unit"]
                for i in where.get((lv, g), [])]
        if mine:
            best = max(best, int(hit[mine].sum(axis=0).max()))
    return best


def table_cell_of_person(persons: pd.DataFrame, cells: pd.DataFrame, attributes: list[str], table: str) -> np.ndarray:
    """The number of the one cell of ``table`` each person is counted in (0: none, for a table whose
    groups leave values out); a table in which a person could be in two cells is an error naming it."""
    distinct = cells.drop_duplicates("cell")[["cell"] + attributes].reset_index(drop=True)
    sets = [[None if v is None else set(v) for v in row] for row in distinct[attributes].itertuples(index=False)]
    for i in range(len(sets)):  # from the cells' definitions, never the persons: two cells overlap when every
        for j in range(i + 1, len(sets)):  # attribute lets a value through both
            if all(x is None or y is None or x & y for x, y in zip(sets[i], sets[j])):
                raise ValueError(f"table {table} has cells that overlap (cells {distinct['cell'][i]} and "
                                 f"{distinct['cell'][j]}): this adapter publishes cross-tabulations, whose cells "
                                 "partition persons")
    out = np.zeros(len(persons), dtype=np.int64)
    for number, row in zip(distinct["cell"], sets):
        hit = np.ones(len(persons), dtype=bool)
        for a, allowed in zip(attributes, row):
            if allowed is not None:
                hit &= persons[a].isin(list(allowed)).to_numpy()
        out[hit] = int(number)
    return out
