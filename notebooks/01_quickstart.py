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
# # Quick start: reconstruct a census tract from its published marginals
#
# This notebook walks through one RAP-Rank experiment by hand, then runs a whole config.
# It runs on the embedded synthetic population; nothing is downloaded.
# Set `CENSUSRECON_CONFIG` to choose the config (the tests use `configs/tiny.yaml`).

# %%
import os
from pathlib import Path

import jax
import numpy as np

from censusrecon.experiments.config import load_config
from censusrecon.experiments.metrics import effective_u, k_grid, match_rate_curve
from censusrecon.experiments.problem import resolve
from censusrecon.experiments.runner import run_experiment
from censusrecon.microdata.marginals import Workload, answer
from censusrecon.reconstruct.queries import MarginalPlan
from censusrecon.reconstruct.rap import RAPSettings, rap_rank

ROOT = Path.cwd() if (Path.cwd() / "configs").exists() else Path.cwd().parent
config_path = os.environ.get("CENSUSRECON_CONFIG", str(ROOT / "configs" / "demo.yaml"))
cfg = load_config(config_path)
print(cfg.name, "-", cfg.target.units, cfg.target.level + "s,", "K =", cfg.attack.runs)

# %% [markdown]
# ## The private data D and what is published about it
# One tract, split into the private half D and a holdout half (the strongest prior an
# attacker could have). The attack sees only Q(D): here all 2-way marginals.

# %%
study = resolve(cfg)  # the config resolved once against its data: units, blocks, attributes
unit = study.units[0]
problem = study.prepare(unit, with_block=False)
D = problem.private
workload = Workload.all_kway(D.domain, cfg.queries[0].k)
published = answer(D, workload)
print(f"tract {unit}: {len(D)} persons, {D.distinct()} distinct rows, {workload.num_queries} published queries")

# %% [markdown]
# ## RAP-Rank: K relaxed-projection fits, unioned, ranked by how often a row comes back

# %%
a = cfg.attack
result = rap_rank(MarginalPlan.build(workload), published, D.domain, jax.random.key(cfg.seed), a.runs,
                  RAPSettings(rows=a.rows, steps=a.steps, learning_rate=a.learning_rate))
print("top 5 candidate rows (AGE, SEX, HISP, RACE) and their counts over K runs:")
for key, score in zip(result.ranking.keys[:5], result.ranking.scores[:5]):
    row = D.domain.decode(np.array([key]))[0]
    labels = [attr.values[c] for attr, c in zip(D.domain.attributes, row)]
    print(f"  {labels}  x{int(score)}")

# %% [markdown]
# ## How many of the top-k candidates are real rows of D?

# %%
u = effective_u(D.distinct(), problem.holdout.distinct())
curve = match_rate_curve(result.ranking, D.keys(), k_grid(u, 10), u)
print(curve[["k", "k_over_u", "num_matched", "match_rate"]].round(3).to_string(index=False))

# %% [markdown]
# ## The whole experiment: every unit, every baseline, Parquet and a plot

# %%
out = Path(os.environ.get("CENSUSRECON_OUT", ROOT / "results"))
run_dir = run_experiment(cfg, out, progress=False)
print("results in", run_dir)
print(sorted(p.name for p in run_dir.iterdir()))
