#!/usr/bin/env bash
# One prepared GPU check, to fit a short rented GPU window (target: under 8 minutes):
# install the project with JAX's CUDA wheels, check that JAX sees the GPU, print the bench JSON
# with the K = 100 x T = 1000 fits run for real and the issue's GPU figure: 50 tracts x K = 100
# x T = 1000 end to end (`units_seconds`; target under 60 s on one H200); the bench JSON includes the
# census step (24 blocks at n' = 300, 85 blocks at n' = 1000); then one release evaluation of one tract
# at the paper's strength (K = 100, T = 1000, n' = 1000), its seconds as a JSON line; then the paper's
# census experiment on 8 tracts of the 2010-shaped population (configs/census/tracts_2010.yaml, the
# README's 2-core run), its seconds as a JSON line.
# Run from the repository root on the GPU machine:  bash bench/gpu.sh
# Not yet run on a GPU: no GPU was lent to the session that wrote it (see the issue notes).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-gpu
.venv-gpu/bin/python -m pip install --quiet --upgrade pip
.venv-gpu/bin/python -m pip install --quiet -e ".[gpu]"
.venv-gpu/bin/python - <<'PY'
import jax
devices = jax.devices()
print("JAX", jax.__version__, "backend", jax.default_backend(), devices)
if jax.default_backend() != "gpu":
    raise SystemExit("JAX does not see a GPU: check the driver and the jax[cuda12] install")
PY
timeout 420 .venv-gpu/bin/python bench/run.py --full --units 50 --units-runs 100 --units-steps 1000
start=$(date +%s)
timeout 300 .venv-gpu/bin/censusrecon evaluate-release configs/release_agency.yaml --out results-gpu --no-progress \
  --set attack.strength=paper --set 'release.epsilons=[2.0]' --set 'release.mechanisms=[laplace_tables, topdown]' \
  --set 'target.unit_ids=["01005000100"]' --set release.audit.runs=20000 > results-gpu.log 2>&1 \
  && echo "{\"release_paper_strength_one_tract_s\": $(( $(date +%s) - start ))}" \
  || echo "{\"release_paper_strength_one_tract_s\": null, \"log\": \"results-gpu.log\"}"
start=$(date +%s)
timeout 600 .venv-gpu/bin/censusrecon sweep configs/census/tracts_2010.yaml --backend local --out results-gpu \
  --no-progress > results-gpu-sweep.log 2>&1 \
  && echo "{\"tracts_2010_sweep_s\": $(( $(date +%s) - start ))}" \
  || echo "{\"tracts_2010_sweep_s\": null, \"log\": \"results-gpu-sweep.log\"}"
