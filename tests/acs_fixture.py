"""A tiny ACS PUMS person file set in folktables' on-disk layout, generated for offline tests."""

from pathlib import Path

import numpy as np
import pandas as pd

from censusrecon.microdata.acs import STATE_FIPS


def _maybe_null(rng, values, p):
    values = values.astype(float)
    values[rng.random(values.size) < p] = np.nan
    return values


def make_acs_root(root: Path, states=("CA", "TX"), year: int = 2018, n: int = 240, seed: int = 0,
                  relshipp: bool = False) -> Path:
    """Write root/<year>/1-Year/psam_p<FIPS>.csv for each state; returns root."""
    rng = np.random.default_rng(seed)
    d = root / str(year) / "1-Year"
    d.mkdir(parents=True, exist_ok=True)
    for si, st in enumerate(states):
        age = rng.integers(0, 95, n)
        cols = {
            "RT": ["P"] * n,
            "SERIALNO": [f"{year}GQ{si:02d}{i:07d}" for i in range(n)],
            "ST": np.full(n, int(STATE_FIPS[st])),
            "PUMA": rng.choice([101 + si, 202 + si], n),
            "AGEP": age,
            "SCHL": np.where(age < 3, np.nan, rng.integers(1, 25, n)),
            "MAR": rng.integers(1, 6, n),
            "DIS": rng.integers(1, 3, n),
            "ESP": _maybe_null(rng, rng.integers(1, 9, n), 0.7),
            "CIT": rng.integers(1, 6, n),
            "MIG": _maybe_null(rng, rng.integers(1, 4, n), 0.05),
            "MIL": np.where(age < 17, np.nan, rng.integers(1, 5, n)),
            "ANC": rng.integers(1, 5, n),
            "NATIVITY": rng.integers(1, 3, n),
            "DEAR": rng.integers(1, 3, n),
            "DEYE": rng.integers(1, 3, n),
            "DREM": np.where(age < 5, np.nan, rng.integers(1, 3, n)),
            "SEX": rng.integers(1, 3, n),
            # a race code that only the second state has, to check categories are the union
            "RAC1P": rng.integers(1, 9, n) if si == 0 else rng.integers(1, 10, n),
            "ESR": np.where(age < 16, np.nan, rng.integers(1, 7, n)),
            "PINCP": np.where(age < 15, np.nan, np.round(rng.gamma(1.5, 20000, n), -2)),
            "FER": _maybe_null(rng, rng.integers(1, 3, n), 0.5),
            "PUBCOV": rng.integers(1, 3, n),
            "GCL": _maybe_null(rng, rng.integers(1, 3, n), 0.6),
            "COW": _maybe_null(rng, rng.integers(1, 10, n), 0.4),
            "WKHP": _maybe_null(rng, rng.integers(1, 99, n), 0.4),
            "JWMNP": _maybe_null(rng, rng.integers(1, 150, n), 0.5),
            "PWGTP": rng.integers(1, 200, n),
        }
        cols["RELSHIPP" if relshipp else "RELP"] = rng.integers(20, 39, n) if relshipp else rng.integers(0, 18, n)
        pd.DataFrame(cols).to_csv(d / f"psam_p{STATE_FIPS[st]}.csv", index=False)
    return root


def make_nist_file(path: Path, n: int = 200, seed: int = 0) -> Path:
    """A small file in the NIST excerpt format with its data dictionary beside it."""
    rng = np.random.default_rng(seed)
    pumas = rng.choice(["25-00101", "25-00102", "48-00201"], n)
    age = rng.integers(0, 99, n)
    df = pd.DataFrame({
        "PUMA": pumas,
        "AGEP": age,
        "SEX": rng.integers(1, 3, n),
        "MSP": np.where(age < 15, "N", rng.integers(1, 7, n).astype(str)),
        "NOC": np.where(rng.random(n) < 0.2, "N", rng.integers(0, 4, n).astype(str)),
        "PINCP": np.where(age < 15, "N", (rng.gamma(1.5, 20000, n)).round(-2).astype(str)),
        "PWGTP": rng.integers(1, 100, n),
    })
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)
    dictionary = {
        "PUMA": {"values": {p: p for p in ("25-00101", "25-00102", "48-00201")}},
        "AGEP": {"values": {"min": 0, "max": 99}},
        "SEX": {"values": {"1": "Male", "2": "Female"}},
        "MSP": {"values": {"N": "N/A", **{str(i): str(i) for i in range(1, 7)}}},
        "NOC": {"values": {"N": "N/A", "0": "none", "min": 1, "max": 19}},
        "PINCP": {"values": {"N": "N/A", "min": -9000, "max": 1341000}},
        "PWGTP": {"values": {"min": 1, "max": 9999}},
    }
    import json

    (path.parent / "data_dictionary.json").write_text(json.dumps(dictionary))
    return path
