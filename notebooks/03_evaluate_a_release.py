# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Evaluate a DP release before publishing it
#
# An agency about to publish a tract's 2-way tables asks: does a differentially private
# release stop the reconstruction the exact tables allow, and what does it cost in
# accuracy? This notebook releases one tract's tables by hand, attacks the release,
# runs the whole evaluation from a config, which audits the mechanisms too.
# Set `CENSUSRECON_CONFIG` to choose the config (the tests use `configs/release_tiny.yaml`).

# %%
import os
from pathlib import Path

import jax

from censusrecon.experiments.config import load_config
from censusrecon.experiments.metrics import effective_u, k_grid, match_rate_curve
from censusrecon.experiments.problem import resolve
from censusrecon.experiments.release.evaluate import evaluate_release
from censusrecon.experiments.release.release_report import load_audits
from censusrecon.microdata.marginals import Workload, answer
from censusrecon.reconstruct.queries import MarginalPlan
from censusrecon.reconstruct.rap import RAPSettings, rap_rank
from censusrecon.synth.mechanism import Ledger
from censusrecon.synth.noise import SimulationNoise
from censusrecon.synth.release import laplace_tables, table_utility, workload_counts

ROOT = Path.cwd() if (Path.cwd() / "configs").exists() else Path.cwd().parent
QUICK = os.environ.get("CENSUSRECON_QUICK") == "1"  # the tests' small settings
cfg = load_config(os.environ.get("CENSUSRECON_CONFIG", str(ROOT / "configs" / "release_demo.yaml")),
                  ["release.audit.runs=4000", "attack.runs=2", "attack.steps=40", "release.risks=false"] if QUICK
                  else None)

# %% [markdown]
# ## One tract, its exact tables, and a Laplace release of them
# Privacy unit: a person. Neighbours: one person's record replaced (n is public). The
# sensitivity of all the tables together follows from that relation and is recorded.

# %%
study = resolve(cfg)  # the config resolved once against its data: units, blocks, attributes
unit = study.units[0]
D = study.prepare(unit, with_block=False).private
workload = Workload.all_kway(D.domain, 2)
exact = answer(D, workload)
ledger = Ledger()
tables, mechanism = laplace_tables(D, workload, epsilon=1.0, backend=SimulationNoise(0), relation="replace_one")
ledger.record(mechanism, backend="simulation", for_publication=False)
print(f"tract {unit}: {len(D)} persons, {len(workload.marginals)} tables, sensitivity {mechanism.sensitivity}, "
      f"noise scale {mechanism.scale:g} per cell")
errors = table_utility(tables.counts, workload_counts(D, workload), workload)
print("mean absolute error per cell (persons), per table:",
      {e["table"]: round(e["mae_per_cell"], 2) for e in errors})

# %% [markdown]
# ## Attack the exact tables and the release

# %%
plan = MarginalPlan.build(workload)
settings = RAPSettings(rows=cfg.attack.rows, steps=cfg.attack.steps)
u = effective_u(D.distinct(), D.distinct())
for name, published in (("exact tables", exact), ("ε = 1 release", tables.answers())):
    res = rap_rank(plan, published, D.domain, jax.random.key(0), cfg.attack.runs, settings)
    curve = match_rate_curve(res.ranking, D.keys(), k_grid(u, 4), u)
    print(f"{name:>15}: match rate at k/u = 0.25, 0.5, 0.75, 1:", curve.match_rate.round(3).tolist())

# %% [markdown]
# ## The whole evaluation: every mechanism at every ε, attacked and compared with the best guess
# It audits the publishing code too (`censusrecon audit` runs the same audit alone).

# %%
out = Path(os.environ.get("CENSUSRECON_OUT", ROOT / "results"))
run_dir = evaluate_release(cfg, out, progress=False)
print("report:", run_dir / "report.md")

# %% [markdown]
# ## Audit: is the publishing code as private as it says?
# Each mechanism is released through the same function the evaluation attacks, on two
# worst-case neighbouring datasets, at every ε of the config; the bound must stay at or
# below the declared ε and every named check must pass (a check not run says why).

# %%
for result in load_audits(run_dir):
    print(f"{result.mechanism:>20}: declared ε {result.declared_epsilon:g}, audited ε ≥ "
          f"{result.epsilon_lower_bound:.3f}; {result.checks_summary()}")

# %%
print((run_dir / "report.md").read_text()[:1500])
