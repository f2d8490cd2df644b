"""The inference games of one unit's releases as evaluate-release plays them: the outside data the realistic
adversary reads, how each kind of release is drawn again for the informed game, and why a game was not played."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from censusrecon.experiments.release.inference_games import (ATTRIBUTE, INFORMED, REALISTIC, UnitGames, default_secret,
                                                             summarise_attribute, summarise_membership)
from censusrecon.synth.audit.roc import GameError
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.errors import ConfigError
from censusrecon.microdata.seeds import stable_seed
from censusrecon.reconstruct.inference import InferenceError
from censusrecon.synth import registry
from censusrecon.synth.keyed import KeyedNoise
from censusrecon.synth.publishing import Draw
from censusrecon.synth.registry import EXACT
from censusrecon.synth.release_draws import Batches, Drawer, mechanism_drawer, program_drawer
from censusrecon.synth.release_path import publish

log = logging.getLogger(__name__)

#: outside data the realistic adversary and the best guess read, finest first (the baselines' priors)
REFERENCE_ORDER = ("county", "state", "national", "chance")
#: the most outside persons drawn from a prior that has no rows of its own (a product of margins)
_REFERENCE_DRAWS = 20_000


def reference_of(priors: dict, domain, rng: np.random.Generator) -> tuple[Dataset | None, str]:
    """The outside data of one unit over its domain, and its name: the finest geographic baseline's persons (BLOCK
    drawn from the public block weights where the unit keeps BLOCK), else persons drawn from the chance baseline;
    (None, why) where the evaluation has neither."""
    for name in REFERENCE_ORDER:
        prior = priors.get(name)
        if prior is None:
            continue
        codes = getattr(prior, "codes", None)
        if codes is None:
            pool = getattr(getattr(prior, "pool", None), "codes", None)
            codes = prior.sample(max(len(pool) if pool is not None else 0, _REFERENCE_DRAWS), rng)
        return Dataset(domain, np.asarray(codes)), name
    return None, "no outside data: baselines list no geographic level and no chance"


class ReleaseGames:
    """The games of one unit and variant (``run``: the evaluation's :class:`experiments.release.evaluate._UnitRun`):
    every release's membership (informed and realistic) and attribute games, their scores and why any was not
    played."""

    def __init__(self, run):
        self.run = run
        cfg, prob = run.cfg, run.prob
        self.settings = cfg.release.inference
        names = tuple(run.D.domain.names)
        secret = self.settings.secret or default_secret(names)
        if secret not in names or secret == "BLOCK":
            raise ConfigError(f"release.inference.secret: {secret!r} is not an attribute of the data "
                              f"({', '.join(a for a in names if a != 'BLOCK')}): name one of them")
        rng = np.random.default_rng(stable_seed("inference-reference", cfg.seed, run.unit, run.wb))
        self.reference, self.reference_name = reference_of(run.study.priors(prob), run.D.domain, rng)
        self.games = UnitGames(run.D, run.H, run.w, run.exact_counts, self.reference, self.settings,
                               cfg.release.relation == "replace_one", (cfg.seed, run.unit, run.wb), secret)
        self.scores: list[pd.DataFrame] = []
        self.attributes: list[pd.DataFrame] = []
        self.notes: list[dict] = []

    def frames(self) -> dict[str, pd.DataFrame]:
        """What the unit's games leave: membership scores, attribute rows, and why a game was not played."""
        return {"membership": pd.concat(self.scores, ignore_index=True) if self.scores else pd.DataFrame(),
                "attribute": pd.concat(self.attributes, ignore_index=True) if self.attributes else pd.DataFrame(),
                "inference_notes": pd.DataFrame(self.notes)}

    def _note(self, tag: tuple, attack: str, why: str) -> None:
        unit, variant, mech, setting = tag
        self.notes.append({"unit": unit, "variant": variant, "mechanism": mech, "setting": float(setting),
                           "attack": attack, "note": why})

    def _play(self, tag: tuple, attack: str, fn) -> None:
        try:
            out = fn()
        except (GameError, InferenceError) as e:
            self._note(tag, attack, str(e))
            return
        if out is None:
            return
        (self.attributes if attack == ATTRIBUTE else self.scores).append(out)

    def exact(self) -> None:
        """The yardstick: the realistic attacks on the exact tables (the informed adversary always wins there)."""
        if not self.settings.run:
            return
        tag = (self.run.unit, self.run.wb, EXACT, np.inf)
        counts = self.run.exact_counts.astype(np.float64)
        self._play(tag, REALISTIC, lambda: self.games.realistic(counts, tag))
        self._play(tag, ATTRIBUTE, lambda: self.games.attribute(counts, tag))

    def release(self, mech: str, setting: float, pub) -> None:
        """Every game on one release (``pub``, as published) of ``mech`` at ``setting``."""
        if not self.settings.run:
            return
        tag = (self.run.unit, self.run.wb, mech, setting)
        if pub.counts is None:
            for a in (INFORMED, REALISTIC, ATTRIBUTE):
                self._note(tag, a, "the release publishes no counts of the declared tables")
            return
        self._play(tag, ATTRIBUTE, lambda: self.games.attribute(pub.counts, tag))
        if len(self.run.H):
            self._play(tag, REALISTIC, lambda: self.games.realistic(pub.counts, tag, rows=pub.rows))
        else:
            self._play(tag, REALISTIC, lambda: self._realistic_on_half(mech, setting, tag))
        drawer, why = self.drawer(mech, setting, pub)
        if drawer is None:
            self._note(tag, INFORMED, why)
        else:
            self._play(tag, INFORMED, lambda: self.games.informed(drawer, tag))

    def _realistic_on_half(self, mech: str, setting: float, tag: tuple):
        """Whole units leave no non-members: the release is drawn again, through its own publishing function, for a
        random half of the unit, whose other half are the non-members."""
        publish_on = self._publisher(mech, setting)
        if publish_on is None:
            raise GameError("whole units leave no non-members, and this release cannot be drawn again for half of "
                            "the unit (a file made elsewhere, or a release of a whole tree)")
        D = self.run.D
        rng = np.random.default_rng(stable_seed("inference-half", self.run.cfg.seed, self.run.unit, self.run.wb))
        order = rng.permutation(len(D))
        half_in, half_out = D.take(np.sort(order[: len(D) // 2])), D.take(np.sort(order[len(D) // 2:]))
        counts, rows = publish_on(half_in)
        return self.games.realistic(counts, tag, half_in, half_out, rows)

    def _publisher(self, mech: str, setting: float):
        """``data -> (published counts, published rows or None)`` for one more release of ``mech`` (None: it cannot be
        drawn again)."""
        run = self.run
        if registry.is_program(mech):
            program = run.cfg.release.program(mech)
            return lambda data: (run.cache["layout"].to_queries(self._program_values(program, data, setting, 1, 0))[0],
                                 None)
        if registry.is_file(mech) or registry.mechanism(mech).scope == "root":
            return None
        kind = registry.mechanism(mech)
        if kind.needs_pool:
            return None
        backend = KeyedNoise(stable_seed("inference-half-noise", run.cfg.seed, run.unit, run.wb, mech, setting))
        rng = np.random.default_rng(stable_seed("inference-half-rng", run.cfg.seed, run.unit, run.wb, mech, setting))
        key = run.fit_key(setting) if kind.needs_fit else None
        def one(data):
            pub = publish(run.spec, mech, setting, data, run.w, Draw(backend, rng, key=key))
            return pub.counts, pub.rows
        return one

    def _program_values(self, program, data: Dataset, setting: float, runs: int, first: int) -> np.ndarray:
        from censusrecon.synth.program_host import program_inputs, run_program

        run = self.run
        inputs = program_inputs(data, run.unit, run.cache["layout"], run.study.blocks(run.unit)[0] if run.wb else None,
                                run.prob.areas)
        return run_program(run.cfg, program, inputs, setting, runs,
                           stable_seed("inference-program", run.cfg.seed, run.unit, run.wb, program.name, setting, first))

    def drawer(self, mech: str, setting: float, pub) -> tuple[Drawer | None, str]:
        """How the informed game draws more releases of ``mech`` at ``setting`` (:mod:`synth.release_draws`; its
        noise keyed by the experiment's seed), or why it cannot."""
        run, s = self.run, self.settings
        seed = stable_seed("inference-informed", run.cfg.seed, run.unit, run.wb, mech, setting)
        if registry.is_file(mech):
            return None, "a file made elsewhere cannot be drawn again with and without the target"
        slow = run.study.units.index(run.unit) >= s.slow_units
        if registry.is_program(mech):
            if slow:
                return None, (f"played on the first {s.slow_units} unit(s) only (release.inference.slow_units): a "
                              "program is slow to call many times")
            program = run.cfg.release.program(mech)
            return program_drawer(lambda data, runs, first: self._program_values(program, data, setting, runs, first),
                                  run.cache["layout"].to_queries, program.noise, s.program_releases)
        if registry.mechanism(mech).draws == "fitted" and slow:
            return None, (f"played on the first {s.slow_units} unit(s) only (release.inference.slow_units): each "
                          "release is a fit")
        scale = getattr(pub.record, "scale", None) if pub.record is not None else None
        return mechanism_drawer(run.spec, mech, setting, run.w, scale, run.fit_key(setting),
                                Batches(seed, s.informed_releases, s.informed_fits))


def game_summaries(cfg, games: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The membership and attribute figures of every release, pooled over units (``games``: the units' scores and
    rows), with DP's bound at each program's declared δ."""
    r = cfg.release

    def delta_of(mech: str, setting: float) -> float:
        if registry.is_program(mech):
            return r.program(mech).delta_of() or 0.0
        return 0.0

    membership = summarise_membership(games.get("membership"), r.inference.fpr, delta_of)
    return membership, summarise_attribute(games.get("attribute"))
