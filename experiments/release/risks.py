"""Risks an analyst of synthetic data expects (singling out, linkability, attribute inference), measured by anonymeter on every microdata file a release publishes."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from censusrecon.microdata.dataset import Dataset

log = logging.getLogger(__name__)

#: Environment variable naming the Python interpreter that has anonymeter (default: ``.venv-risk``
#: beside the project's ``.venv``, made by ``make risk-env``).
PYTHON_ENV = "CENSUSRECON_ANONYMETER_PYTHON"
WORKER = Path(__file__).with_name("anonymeter_worker.py")
#: Attacks per evaluator (anonymeter's default is 500), capped by the smallest of the three files.
N_ATTACKS = 500
GEOGRAPHY = ("UNIT", "BLOCK")


def anonymeter_python() -> str | None:
    """The interpreter to run anonymeter with, or None when there is none."""
    named = os.environ.get(PYTHON_ENV)
    if named:
        return named if Path(named).exists() else None
    beside = Path(sys.prefix).parent / ".venv-risk" / "bin" / "python"
    if beside.exists():
        return str(beside)
    return sys.executable if importlib.util.find_spec("anonymeter") is not None else None


def frame(data: Dataset, unit: str) -> pd.DataFrame:
    """Rows as anonymeter reads them: labels, numbers where every label is a number, and the unit."""
    out = {"UNIT": pd.Series([unit] * len(data), dtype=str)}
    for j, a in enumerate(data.domain.attributes):
        labels = pd.Series(list(a.values), dtype=str)
        col = labels.iloc[data.codes[:, j]].reset_index(drop=True)
        out[a.name] = pd.to_numeric(col) if all(v.lstrip("-").isdigit() for v in a.values) else col
    return pd.DataFrame(out)


@dataclass
class RiskJob:
    """One published microdata file (all units of one mechanism and setting) with its private rows
    (D of every unit) and its control set (D_holdout of every unit: same population, never released)."""

    mechanism: str
    setting: float
    ori: pd.DataFrame
    syn: pd.DataFrame
    control: pd.DataFrame
    variant: object = None


def measure(jobs: list[RiskJob], seed: int = 0, timeout: float = 1800,
            n_attacks: int = N_ATTACKS) -> tuple[pd.DataFrame, str | None]:
    """anonymeter's risks for each job (``n_attacks`` per evaluator, capped by the job's smallest file): one
    row per (mechanism, setting, risk) with the risk, its 95% interval and the success rates; and None, or
    why nothing was measured."""
    if not jobs:
        return pd.DataFrame(), "no mechanism of this evaluation publishes microdata"
    python = anonymeter_python()
    if python is None:
        return pd.DataFrame(), ("not run: anonymeter is not installed (its numpy < 1.27 pin conflicts with JAX, so it "
                                "lives in its own environment: make risk-env, or set " + PYTHON_ENV + ")")
    with tempfile.TemporaryDirectory(prefix="censusrecon-risk-") as tmp:
        spec = []
        for i, job in enumerate(jobs):
            paths = {}
            for name in ("ori", "syn", "control"):
                paths[name] = str(Path(tmp) / f"{i}_{name}.parquet")
                getattr(job, name).to_parquet(paths[name], index=False)
            cols = list(job.ori.columns)
            geo = [c for c in cols if c in GEOGRAPHY]
            person = [c for c in cols if c not in GEOGRAPHY]
            half = (len(person) + 1) // 2  # linkability: where and the first attributes, against the rest
            spec.append({"id": str(i), **paths, "aux_cols": [geo + person[:half], person[half:]], "secrets": person,
                         "seed": seed, "n_attacks": int(min(n_attacks, len(job.ori), len(job.syn), len(job.control)))})
        (Path(tmp) / "jobs.json").write_text(json.dumps({"jobs": spec}))
        out = Path(tmp) / "results.json"
        proc = subprocess.run([python, str(WORKER), str(Path(tmp) / "jobs.json"), str(out)], capture_output=True,
                              text=True, timeout=timeout)
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines() or ["no message"]
            last = next((x for x in reversed(lines) if "Error" in x or "error" in x), lines[-1])
            return pd.DataFrame(), f"failed: anonymeter ({python}) ended with: {last}"
        rows = json.loads(out.read_text())
    df = pd.DataFrame(rows)
    ids = {str(i): j for i, j in enumerate(jobs)}
    df.insert(0, "setting", [ids[i].setting for i in df["id"]])
    df.insert(0, "mechanism", [ids[i].mechanism for i in df["id"]])
    df.insert(0, "variant", [ids[i].variant for i in df["id"]])
    return df.drop(columns="id"), None
