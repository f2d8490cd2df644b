"""Run directories keyed by config hash; atomic JSON/YAML/Parquet writes; the run manifest."""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import pandas as pd
import pyarrow as pa
import yaml

from microdata.dataset import atomic_write_table


def atomic_write_text(path: Path, text: str) -> None:
    """Write text so a reader sees the old file or the whole new one, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_yaml(path: Path, obj) -> None:
    atomic_write_text(path, yaml.safe_dump(obj, sort_keys=False))


def write_parquet(path: Path, df: pd.DataFrame) -> None:
    atomic_write_table(pa.Table.from_pandas(df, preserve_index=False), path)


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for pkg in ("censusrecon", "jax", "jaxlib", "optax", "numpy", "pandas", "pyarrow", "pydantic", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def jax_info() -> dict:
    import jax

    return {"backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()]}
