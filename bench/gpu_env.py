"""What the GPU check runs on, as one JSON line: Python, JAX and its backend, the devices, the versions
of the packages the project imports, and every module of the project imported (a module that cannot be
imported there names the package missing from ``bench/gpu_wheels.txt``).

    python bench/gpu_env.py            # exits 3 if JAX sees no GPU
    python bench/gpu_env.py --dry-run  # the same report on whatever backend JAX has (the CPU here)
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import pkgutil
import platform
import subprocess
import sys

#: the project's top-level packages
PACKAGES = ("microdata", "reconstruct", "baselines", "synth", "experiments")
#: the distributions whose versions the report gives: what the project imports, from the machine or a wheel
DISTRIBUTIONS = ("jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "optax", "numpy", "pandas", "pyarrow",
                 "matplotlib", "scipy", "pyyaml", "tqdm", "pydantic", "pydantic-core", "highspy", "clarabel", "osqp",
                 "opendp", "pytest", "pytest-xdist", "setuptools", "wheel", "wrapt", "jinja2", "joblib",
                 "censusrecon")


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def unimportable() -> dict[str, str]:
    """Every module of the project that fails to import, with why (empty: all import)."""
    bad = {}
    for top in PACKAGES:
        pkg = importlib.import_module(f"censusrecon.{top}")
        for info in pkgutil.walk_packages(pkg.__path__, f"censusrecon.{top}."):
            try:
                importlib.import_module(info.name)
            except Exception as exc:  # noqa: BLE001 - the report names every failure
                bad[info.name] = f"{type(exc).__name__}: {exc}"[:300]
    return bad


def gpu_name() -> str | None:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="report on any backend instead of requiring a GPU")
    args = ap.parse_args()
    import jax

    report = {"python": platform.python_version(), "executable": sys.executable, "jax": jax.__version__,
              "backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()],
              "device_kind": jax.devices()[0].device_kind, "nvidia_smi": gpu_name(),
              "versions": {d: version(d) for d in DISTRIBUTIONS}, "unimportable": unimportable()}
    print(json.dumps({"environment": report}))
    if report["unimportable"]:
        raise SystemExit(4)
    if not args.dry_run and report["backend"] != "gpu":
        print(f"JAX {jax.__version__} sees no GPU (backend {report['backend']}, devices {report['devices']}): "
              "the machine's JAX needs its CUDA plugin (jax-cuda13-plugin or jax-cuda12-plugin) and a driver",
              file=sys.stderr)
        raise SystemExit(3)


if __name__ == "__main__":
    main()
