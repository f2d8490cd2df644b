#!/usr/bin/env bash
# The GPU check, prepared for the lent GPU machine: offline, one H200, Python 3.12 with JAX and its CUDA plugin
# already installed (bench/gpu_machine.txt lists what else it has). One run, ending within 8 minutes:
#   1. installs the wheels of what that machine lacks (.whl, made here by `make gpu-wheels`) with --no-index
#      beside the machine's own JAX (no venv hides it), and the project with --no-deps;
#   2. reports the environment and imports every module of the project; refuses if JAX sees no GPU;
#   3. the JAX tests on the GPU backend (reconstruct/, the census step, the release path's JAX parts);
#   4. bench/run.py: XLA's count of the census steps' bytes, the 85-block step's rate, share of its memory floor
#      and profile (its longest kernels), the same step on the fused kernels (census85-pallas: its rate and floor
#      share, and how near its fit is to the XLA step's),
#      RAP-Rank K = 100 x T = 1000 end to end (2-way, 3-way), 50 tracts x K = 100 x T = 1000 in
#      shared calls (goal under 60 s on one H200), the 85-block and 24-block census steps with their fractions
#      of the measured peak, the 2-way and 3-way step rates;
#   5. a state streamed through the GPU (bench/run.py --parts state: 48 tracts of configs/census/state_2010.yaml at
#      the paper's strength, GPU_STATE_TRACTS others): tracts/s, compiles apart, the nation projected; the census
#      kernels chosen as a run chooses them (kernel auto: checked and timed on the card; GPU_STATE_KERNEL forces);
#   6. as much of the paper's census experiment on 8 tracts of the 2010-shaped population
#      (configs/census/tracts_2010.yaml) as the time left allows.
# Every figure is a JSON line appended to $OUT/gpu.jsonl the moment it is measured, so a run cut short keeps
# what it measured; logs beside it. Each step has its own time limit inside the whole run's.
# GPU_STAGES (default tests,bench,state,tracts) runs fewer steps, GPU_BENCH_PARTS other bench parts, GPU_TESTS_S
# another limit for the tests (170 s: 159 took 115 s there), GPU_BUDGET_S another limit for the whole run: a rerun inside a lease's last minutes measures only what is missing.
#
#   make gpu-wheels                 here, once (the wheels, pinned in bench/gpu_wheels.txt, into .whl)
#   bash bench/gpu.sh               there, from the repository root, with .whl carried; $OUT receives the figures
#   bash bench/gpu.sh --dry-run     here (make test runs it): the same steps and install path on the CPU at small
#                                   sizes, in .venv-gpu-dry (only what the GPU machine has: `make gpu-dry-env`)
set -uo pipefail
cd "$(dirname "$0")/.."

dry=0
[ "${1:-}" = "--dry-run" ] && dry=1
if [ "$dry" = 1 ]; then
  py=${GPU_PYTHON:-.venv-gpu-dry/bin/python}
  wheels=${GPU_WHEELS:-$(cat .venv-gpu-dry/wheels 2>/dev/null || echo .whl)}
  # the dry run's sizes are fixed and small; no budget cuts a stage short, so that whether it passes never
  # depends on the machine's speed (a loaded machine once left the state stage no time); each step's own limit,
  # ten times over, still ends a hang
  budget=${GPU_BUDGET_S:-100000}
  stretch=10
else
  py=${GPU_PYTHON:-python3}
  wheels=${GPU_WHEELS:-.whl}
  budget=${GPU_BUDGET_S:-470}
  stretch=1
fi
stages=",${GPU_STAGES:-tests,bench,state,tracts},"
out=${OUT:-results-gpu}
mkdir -p "$out"
figures=$out/gpu.jsonl
: > "$figures"
site=$(mktemp -d "${TMPDIR:-/tmp}/censusrecon-gpu.XXXXXX")
runs=
# the install and the runs are scratch: removed however the check ends (a step past its limit, an error, a kill)
trap 'rm -rf "$site" ${runs:+"$runs"}' EXIT
start=$(date +%s)

line() { echo "$1" >> "$figures"; echo "$1"; }
left() { echo $(( budget - ($(date +%s) - start) )); }
# the smaller of a step's own limit and the time the whole run has left
limit() { local l own=$(( $1 * stretch )); l=$(left); [ "$l" -lt 1 ] && l=1; [ "$own" -lt "$l" ] && echo "$own" || echo "$l"; }
since() { echo $(( $(date +%s) - $1 )); }

line "{\"gpu_check\": \"$([ "$dry" = 1 ] && echo dry-run || echo gpu)\", \"started\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\", \"commit\": \"${GPU_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}\", \"budget_s\": $budget}"

# 1. install: the carried wheels, then the project, never from an index
if ! ls "$wheels"/*.whl >/dev/null 2>&1; then
  line "{\"install_error\": \"no wheels in $wheels: run make gpu-wheels here and carry .whl\"}"
  exit 2
fi
t=$(date +%s)
if ! "$py" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --target "$site" \
     "$wheels"/*.whl . > "$out/install.log" 2>&1; then
  line "{\"install_error\": \"the wheels or the project did not install: $out/install.log\"}"
  tail -20 "$out/install.log"
  exit 2
fi
export PYTHONPATH=$site
rm -rf build censusrecon.egg-info
line "{\"install_s\": $(since "$t")}"

# 2. the environment; every module imported; a GPU or a clear refusal
"$py" bench/gpu_env.py $([ "$dry" = 1 ] && echo --dry-run) >> "$figures"
rc=$?
tail -1 "$figures"
if [ $rc -ne 0 ]; then
  [ $rc = 3 ] && line "{\"refused\": \"JAX sees no GPU on this machine: nothing measured\"}"
  [ $rc = 4 ] && line "{\"refused\": \"modules of the project do not import: a wheel is missing from bench/gpu_wheels.txt\"}"
  exit $rc
fi

# 3. the JAX tests on this backend (several processes share the GPU: no preallocation)
if [ "$dry" = 1 ]; then
  # a few of the JAX tests (plans against einsum, hand-written gradients against autodiff) under the machine's JAX:
  # the stage's machinery and that JAX's API, in 12 s (the whole file took 37 s in make test)
  tests=(tests/reconstruct/test_queries.py -k "plan_matches_one_einsum or definition and not 3 or layout or flops")
  workers=1
else
  tests=(tests/reconstruct reconstruct tests/microdata/test_census.py tests/synth synth)
  workers=4  # 8 workers took longer than 4 on that machine (151 of 157 in 130 s against 157 in 104 s)
fi
if [[ $stages == *,tests,* ]]; then
t=$(date +%s)
# -v names every test as it ends, so a run cut short still says which ones never finished; SIGINT first lets
# pytest write its junit report and summary before the kill
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout -s INT -k 15 "$(limit "${GPU_TESTS_S:-170}")" "$py" -m pytest -v \
  -p no:cacheprovider -n "$workers" --dist loadfile --durations=15 --junitxml="$out/tests.xml" "${tests[@]}" \
  > "$out/tests.log" 2>&1
rc=$?
grep -E "passed|failed|error" "$out/tests.log" | tail -3
"$py" - "$out/tests.xml" "$rc" "$(since "$t")" "$out/tests.log" >> "$figures" <<'PY'
import json, re, sys
import xml.etree.ElementTree as ET
path, rc, seconds, log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
res = {"tests_rc": rc, "tests_s": seconds}
# from the -v log, whatever became of the report: how many ended, and the ones that started and never ended
text = open(log, errors="replace").read()
ended = re.findall(r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b\s+(\S+::\S+)", text)
res["ended"] = len(ended)
res["failed_in_log"] = [n for o, n in ended if o in ("FAILED", "ERROR")][:20]
if rc == 124 or rc == 130 or rc == 137:
    res["slowest_log"] = re.findall(r"^\s*([0-9.]+s call\s+\S+)", text, flags=re.M)[:8]
try:
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    res.update({k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")})
    res["failed"] = [f"{c.get('classname')}::{c.get('name')}" for c in suite.iter("testcase")
                     if c.find("failure") is not None or c.find("error") is not None][:20]
except (OSError, ET.ParseError) as exc:
    res["report"] = f"no junit report ({exc}): timed out?"
print(json.dumps(res))
PY
tail -1 "$figures"
fi

# 4. the bench, each figure a JSON line as it is measured
if [ "$dry" = 1 ]; then
  bench=(--quick --parts cost,profile,2way-fit,units,census,census85-pallas)
else
  bench=(--full --parts "${GPU_BENCH_PARTS:-cost,census85,census85-pallas,profile,2way-fit,3way-fit,units,census,2way-steps,3way-steps}"
         --units 50 --units-runs 100 --units-steps 1000)
fi
if [[ $stages == *,bench,* ]]; then
t=$(date +%s)
timeout "$(limit 230)" "$py" bench/run.py "${bench[@]}" --jsonl "$figures" > "$out/bench.log" 2>&1
rc=$?
grep -E "MET|peak:|units in|FAILED" "$out/bench.log"
line "{\"bench_rc\": $rc, \"bench_s\": $(since "$t")}"
fi

# 5. a state streamed through the GPU: the first tracts of the 2010-shaped state of configs/census/state_2010.yaml
# at the paper's strength, tracts/s with the compiles apart and the projection for the nation
if [ "$dry" = 1 ]; then
  state=(--quick)
else
  state=(--state-tracts "${GPU_STATE_TRACTS:-48}")
fi
# the census kernels as a user's run picks them (kernel auto: on a GPU the fused kernels where they agree with XLA's
# ops and run the first block faster; the figure says which and the timings); GPU_STATE_KERNEL=xla|pallas forces one
kernel=${GPU_STATE_KERNEL:-auto}
if [[ $stages == *,state,* ]]; then
t=$(date +%s)
timeout "$(limit 150)" "$py" bench/run.py --parts state "${state[@]}" --state-kernel "$kernel" --jsonl "$figures" \
  > "$out/state.log" 2>&1
rc=$?
grep -E "^state|FAILED" "$out/state.log"
line "{\"state_rc\": $rc, \"state_s\": $(since "$t")}"
fi

# 6. the paper's census experiment on 8 tracts of the 2010-shaped population, as much as fits (its progress
# bars in the log say how far it got)
if [ "$dry" = 1 ]; then
  tracts=(--no-progress --set attack.strength=config --set attack.runs=2 --set attack.steps=10 --set attack.rows=50
          --set target.units=1 --set 'baselines=[holdout]')
else
  tracts=()
fi
if [[ $stages == *,tracts,* ]]; then
t=$(date +%s)
runs=$(mktemp -d "${TMPDIR:-/tmp}/censusrecon-gpu-runs.XXXXXX")
timeout "$(limit 600)" "$site/bin/censusrecon" run configs/census/tracts_2010.yaml --out "$runs" "${tracts[@]}" > "$out/tracts_2010.log" 2>&1
rc=$?
done_units=$(ls "$runs"/*/*/units/*.json 2>/dev/null | wc -l)
cp "$runs"/*/*/match_rate.png "$out/tracts_2010_match_rate.png" 2>/dev/null
tail -12 "$out/tracts_2010.log"
line "{\"tracts_2010_rc\": $rc, \"tracts_2010_s\": $(since "$t"), \"tracts_2010_units_done\": $done_units, \"tracts_2010_complete\": $([ $rc = 0 ] && echo true || echo false)}"
rm -rf "$runs"
fi

line "{\"gpu_check_s\": $(since "$start")}"
rm -rf "$site"
