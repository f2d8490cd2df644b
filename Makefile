# Quick start: `make demo` runs the main job, `make test` runs the tests.
# Installs skip pip's compiling of every installed module to bytecode (--no-compile): Python compiles the modules
# a run imports, once, and the environments are made in a fraction of the time.
# Both create .venv with pip when it is missing and install the project into it (OpenDP, the publishing backend of
# the release configs, with it), and .venv-risk: anonymeter (the release report's synthetic-data risks) pins
# numpy < 1.27 and JAX needs numpy >= 2, so anonymeter gets an environment of its own.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RISK_VENV := .venv-risk
RISK_STAMP := $(RISK_VENV)/.installed
ANONYMETER := anonymeter==1.1.0
# Tumult Analytics (the release program synth/adapters/tumult_tables.py) pins numpy < 2 and pandas < 2 and
# runs on Spark, which needs Java: an environment of its own, made by `make tumult-env`
TUMULT_VENV := .venv-tumult
TUMULT_STAMP := $(TUMULT_VENV)/.installed
TUMULT := tmlt.analytics==0.21.0
# SmartNoise Synth (synth/adapters/smartnoise_synth.py) pins opendp below censusrecon's: its own environment,
# `make smartnoise-env`. MST and AIM need neither torch nor opacus (its GAN synthesizers do), so the package is
# installed without its declared dependencies and then with those MST and AIM use (pip's warning that opacus is
# missing goes to .venv-smartnoise/pip.log)
SMARTNOISE_VENV := .venv-smartnoise
SMARTNOISE_STAMP := $(SMARTNOISE_VENV)/.installed
SMARTNOISE := smartnoise-synth==1.0.8
SMARTNOISE_DEPS := "Faker>=17" "disjoint-set>=0.9,<0.10" "mbi>=1.1,<2" "pac-synth>=0.0.8,<0.0.9" "smartnoise-sql>=1.0.10" pyarrow

# The GPU check (bench/gpu.sh) runs on a lent machine with no package index: Python 3.12 and its own JAX there.
# `make gpu-wheels` downloads the wheels of what it lacks (bench/gpu_wheels.txt, cp312 manylinux) into .whl,
# which travels with the working tree (64 MiB in all, the tree included). `make gpu-dry-env` makes
# .venv-gpu-dry: only what that machine has (bench/gpu_machine.txt), with Python 3.12 where this machine has
# one, so that `bench/gpu.sh --dry-run` (a test of make test) installs and runs exactly as it will there.
GPU_WHEELS := .whl
GPU_WHEELS_STAMP := $(GPU_WHEELS)/.downloaded
GPU_PLATFORMS := --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any
GPU_DRY_VENV := .venv-gpu-dry
GPU_DRY_STAMP := $(GPU_DRY_VENV)/.installed
# a Python 3.12 (the GPU machine's) if this machine has one: on PATH, or among pyenv's versions
GPU_DRY_PYTHON ?= $(firstword $(foreach p,$(shell command -v python3.12 2>/dev/null) $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12),$(if $(shell $(p) -c 'print(1)' 2>/dev/null),$(p))) $(PYTHON))

# the JAX tests (what bench/gpu.sh runs on the GPU) against the newest JAX this machine can install, in an
# environment of its own with a Python it supports (0.11 and later need Python >= 3.12): make test-jax-newest
JAX_TESTS := tests/reconstruct reconstruct tests/microdata/test_census.py tests/synth synth
JAX_NEWEST_VENV := .venv-jax-newest

# `make gpu-count-env`: JAX's CUDA plugin (for this JAX) and the CUDA compiler in .gpucount (0.8 GB), so that
# `python bench/step_cost_at.py --gpu h100` compiles the RAP step for an H100 on a machine with no GPU and counts
# its bytes (.venv is not changed: the script puts .gpucount on its path)
GPU_COUNT := .gpucount

.PHONY: demo test test-slow bench risk-env tumult-env smartnoise-env java browser clean gpu-wheels gpu-dry-env \
  test-jax-newest gpu-count-env

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -e ".[dev]"
	touch $(STAMP)

$(RISK_STAMP): Makefile
	test -x $(RISK_VENV)/bin/python || $(PYTHON) -m venv $(RISK_VENV)
	$(RISK_VENV)/bin/python -m pip install --quiet --no-compile "$(ANONYMETER)"
	touch $(RISK_STAMP)

risk-env: $(RISK_STAMP)

$(TUMULT_STAMP): Makefile
	@command -v java >/dev/null 2>&1 || { echo "Tumult Analytics runs on Spark, which needs Java (8, 11 or 17): install a JDK (on Debian: apt-get install default-jre-headless), then run make tumult-env again"; exit 1; }
	test -x $(TUMULT_VENV)/bin/python || $(PYTHON) -m venv $(TUMULT_VENV)
	$(TUMULT_VENV)/bin/python -m pip install --quiet --no-compile "$(TUMULT)" pyarrow
	touch $(TUMULT_STAMP)

tumult-env: java $(TUMULT_STAMP)

$(SMARTNOISE_STAMP): Makefile
	test -x $(SMARTNOISE_VENV)/bin/python || $(PYTHON) -m venv $(SMARTNOISE_VENV)
	$(SMARTNOISE_VENV)/bin/python -m pip install --quiet --no-compile --no-deps "$(SMARTNOISE)"
	$(SMARTNOISE_VENV)/bin/python -m pip install --quiet --no-compile $(SMARTNOISE_DEPS) > $(SMARTNOISE_VENV)/pip.log 2>&1 \
	  || { cat $(SMARTNOISE_VENV)/pip.log; exit 1; }
	touch $(SMARTNOISE_STAMP)

smartnoise-env: $(SMARTNOISE_STAMP)

$(GPU_WHEELS_STAMP): bench/gpu_wheels.txt
	rm -rf $(GPU_WHEELS) && mkdir -p $(GPU_WHEELS)
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  $(GPU_PLATFORMS) -d $(GPU_WHEELS) -r bench/gpu_wheels.txt
	@tree=$$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1); whl=$$(du -cb $(GPU_WHEELS)/*.whl | tail -1 | cut -f1); \
	  echo "GPU wheels: $$((whl >> 20)) MiB, with the tracked tree $$(((tree + whl) >> 20)) MiB of the 64 MiB that travel"; \
	  [ $$((tree + whl)) -lt $$((64 << 20)) ] || { echo "over 64 MiB: the working tree and .whl cannot travel"; exit 1; }
	touch $(GPU_WHEELS_STAMP)

gpu-wheels: $(GPU_WHEELS_STAMP)

# the dry run's environment: the GPU machine's packages (JAX's CPU wheels), and the wheels for its Python in
# .whl (cp312) or, where this machine has no Python 3.12, in .whl-dry for the Python it has
$(GPU_DRY_STAMP): bench/gpu_machine.txt bench/gpu_wheels.txt $(GPU_WHEELS_STAMP)
	rm -rf $(GPU_DRY_VENV) && $(GPU_DRY_PYTHON) -m venv $(GPU_DRY_VENV)
	@if $(GPU_DRY_VENV)/bin/python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then \
	  $(GPU_DRY_VENV)/bin/python -m pip install --quiet --no-compile -r bench/gpu_machine.txt && \
	  echo $(GPU_WHEELS) > $(GPU_DRY_VENV)/wheels; \
	else \
	  echo "no Python 3.12 here: the dry run uses $$($(GPU_DRY_VENV)/bin/python --version), the GPU machine's packages"; \
	  echo "and the wheels unpinned (their pins need 3.12), the wheels for this Python in .whl-dry"; \
	  sed 's/==.*//' bench/gpu_machine.txt > $(GPU_DRY_VENV)/machine-unpinned.txt && \
	  $(GPU_DRY_VENV)/bin/python -m pip install --quiet --no-compile -r $(GPU_DRY_VENV)/machine-unpinned.txt "jax<0.13" && \
	  sed 's/==.*//' bench/gpu_wheels.txt > $(GPU_DRY_VENV)/wheels-unpinned.txt && \
	  rm -rf .whl-dry && $(GPU_DRY_VENV)/bin/python -m pip download --quiet --no-deps --only-binary=:all: -d .whl-dry \
	    -r $(GPU_DRY_VENV)/wheels-unpinned.txt && echo .whl-dry > $(GPU_DRY_VENV)/wheels; \
	fi
	touch $(GPU_DRY_STAMP)

gpu-dry-env: $(GPU_DRY_STAMP)

gpu-count-env: $(STAMP)
	jax=$$($(BIN)/python -c 'import jax; print(jax.__version__)') && \
	  $(BIN)/python -m pip install --quiet --no-compile --no-deps --target $(GPU_COUNT) --upgrade \
	    "jax-cuda13-plugin==$$jax" "jax-cuda13-pjrt==$$jax" nvidia-cuda-nvcc nvidia-nvvm nvidia-cuda-runtime \
	    nvidia-cuda-crt

test-jax-newest:
	test -x $(JAX_NEWEST_VENV)/bin/python || $(GPU_DRY_PYTHON) -m venv $(JAX_NEWEST_VENV)
	$(JAX_NEWEST_VENV)/bin/python -m pip install --quiet --upgrade -e . "jax<0.13" "jaxlib<0.13" pytest pytest-xdist opendp
	@$(JAX_NEWEST_VENV)/bin/python -c 'import jax, sys; print("JAX", jax.__version__, "on Python", sys.version.split()[0])'
	$(JAX_NEWEST_VENV)/bin/python -m pytest -q -n 2 --dist loadfile -p no:cacheprovider $(JAX_TESTS)

# Java for Spark: Debian's, installed here where this user may (root with apt-get, as on CI)
java:
	@command -v java >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	    { apt-get install -y --no-install-recommends default-jre-headless >/dev/null 2>&1 || \
	      { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends default-jre-headless >/dev/null 2>&1; }; }; } || \
	  echo "no Java: make tumult-env needs it (apt-get install default-jre-headless)"

# the job's own time beside the README's (a busy or slower machine shows here, not as a surprise); it also makes
# .venv-risk, so that the README's next command (evaluate-release configs/release_demo.yaml, whose synthetic rows'
# risks anonymeter measures) finds every environment it needs
demo: $(STAMP) $(RISK_STAMP)
	@start=$$(date +%s); $(BIN)/censusrecon run configs/demo.yaml; rc=$$?; \
	  rec=$$(ls bench/results/demo_*.json | sort | tail -1); \
	  echo "make demo: $$(( $$(date +%s) - start )) s here; the README's figure: $$($(BIN)/python -c \
	    'import json,sys; r=json.load(open(sys.argv[1])); print(r["figures"]["seconds"], "s,", r["record"])' $$rec)"; \
	  exit $$rc

# the report's first-screen test runs in a real headless Chromium: Debian's, installed here where
# this user may (root with apt-get, as on CI); elsewhere that one test is skipped and says why
# (CENSUSRECON_CHROMIUM names any other Chromium)
browser:
	@command -v chromium >/dev/null 2>&1 || [ -n "$$CENSUSRECON_CHROMIUM" ] || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	    { apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 || \
	      { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends chromium >/dev/null 2>&1; }; }; } || \
	  echo "no Chromium: the report's browser test will be skipped (install chromium or set CENSUSRECON_CHROMIUM)"

# two worker processes, each test file on one (its module fixtures shared): the suite is mostly
# single-threaded compiles, so two workers fill two cores (23 min in one process, under 10 in two;
# a third worker gains nothing: 557 s against 563 s, measured on 2026-12-02)
# the adapters' tests skip, saying why, where their environments cannot be made (Tumult: no Java)
# The environments only three test files need (the GPU dry run's, Tumult's, SmartNoise's: downloads, mostly)
# are built while the tests run, their output in .envs/build.log; those tests wait for .envs/done (the GPU dry
# run fails if its environment was not made, the adapters' tests skip saying why)
test: $(STAMP) $(RISK_STAMP) browser
	@mkdir -p .envs && rm -f .envs/done && \
	  { { $(MAKE) --no-print-directory gpu-dry-env; $(MAKE) --no-print-directory tumult-env; \
	      $(MAKE) --no-print-directory smartnoise-env; } > .envs/build.log 2>&1; touch .envs/done; } &
	CENSUSRECON_ENVS_BUILDING=$(CURDIR)/.envs/done $(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=10

# the slow tier: the same contracts at the shipped settings (tens of minutes); with CENSUSRECON_TEST_DEADLINE
# (an epoch second, as .ci/run sets it) a test starts only when its expected time still fits before it
test-slow: $(STAMP) $(RISK_STAMP)
	-@$(MAKE) --no-print-directory tumult-env
	-@$(MAKE) --no-print-directory smartnoise-env
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m slow

bench: $(STAMP)
	$(BIN)/python bench/rap.py

clean:
	rm -rf results .pytest_cache
