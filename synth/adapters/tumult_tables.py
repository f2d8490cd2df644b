"""The declared tables released through Tumult Analytics, as the Census Bureau and the IRS publish:
one Tumult Analytics session over the persons, each table a group-by count over its cells at its
geography, the budget split evenly over the tables, the noise Tumult's own (two-sided geometric under
pure ε-DP), its accounting Tumult's. Protected change: one row added or removed (AddOneRow); under
replace-one, up to two rows (AddMaxRows(2): one removed, one added).

Tables whose cells partition persons only (each person in at most one cell of a table at its
geography, as a cross-tabulation is); a table with overlapping cells (SF1's totals and subtotals) is
refused with an error naming it.

``runs`` releases come from one session over the persons repeated ``runs`` times with a replicate
number added to every group-by key: each replicate's cells get independent noise of the scale a
single release gets (the scale depends on the budget and the sensitivity of a count, not on the
data), and ``runs = 1`` goes through the same code. Tumult draws its noise from its own secure
source, so ``seed`` is not used.

Needs Java (Spark) and an environment of its own (``make tumult-env``: Tumult Analytics pins numpy
and pandas below what censusrecon uses): ``command: [.venv-tumult/bin/python,
synth/adapters/tumult_tables.py]``."""

from __future__ import annotations

import os
import sys

import numpy as np
import pandas as pd

try:
    from censusrecon.synth.adapters.contract import table_cell_of_person
except ImportError:  # run as a command in an environment of its own
    from contract import table_cell_of_person

_SPARK = {}


def _spark():
    if "session" not in _SPARK:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        import tempfile

        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master("local[1]").appName("censusrecon-tumult")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
                 # pandas frames cross into Spark as Arrow columns, not as rows whose types Spark infers one by one
                 # (most of a call's time is Tumult's noise, drawn in a Python worker: this saves about a second)
                 .config("spark.sql.execution.arrow.pyspark.enabled", "true")
                 .config("spark.sql.warehouse.dir", tempfile.mkdtemp(prefix="censusrecon-spark-")).getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        _SPARK["session"] = spark
    return _SPARK["session"]


def release(persons: pd.DataFrame, cells: pd.DataFrame, domain: dict, epsilon: float, runs: int, seed: int,
            relation: str, **params) -> np.ndarray:
    from tmlt.analytics import AddMaxRows, AddOneRow, KeySet, PureDPBudget, QueryBuilder, Session

    spark = _spark()
    attrs = list(domain["attributes"])
    tables = list(dict.fromkeys(cells["table"]))
    frame = pd.DataFrame({"rep": np.repeat(np.arange(runs), len(persons))})
    for t in tables:
        mine = cells[cells["table"] == t]
        level = mine["level"].iloc[0]
        cell = table_cell_of_person(persons, mine, attrs, t)
        frame[f"g_{t}"] = np.tile(persons[level if level != "unit" else "unit"].astype(str).to_numpy(), runs)
        frame[f"c_{t}"] = np.tile(cell, runs)
    change = AddOneRow() if relation == "add_remove" else AddMaxRows(2)
    session = Session.from_dataframe(privacy_budget=PureDPBudget(epsilon), source_id="persons",
                                     dataframe=spark.createDataFrame(frame), protected_change=change)
    out = np.zeros((runs, len(cells)))
    position = {(t, g, int(c)): i for i, (t, g, c) in enumerate(zip(cells["table"], cells["geography"], cells["cell"]))}
    share = epsilon / len(tables)  # each table's budget: one person is in one cell of each table
    for t in tables:
        mine = cells[cells["table"] == t]
        keys = KeySet.from_dict({"rep": list(range(runs))}) * KeySet.from_dataframe(spark.createDataFrame(
            pd.DataFrame({f"g_{t}": mine["geography"].astype(str), f"c_{t}": mine["cell"].astype(int)})))
        res = session.evaluate(QueryBuilder("persons").groupby(keys).count(), PureDPBudget(share)).toPandas()
        rows = [position[(t, g, int(c))] for g, c in zip(res[f"g_{t}"], res[f"c_{t}"])]
        out[res["rep"].to_numpy(), rows] = res["count"].to_numpy()
    return out


if __name__ == "__main__":
    from contract import serve

    serve(release)
