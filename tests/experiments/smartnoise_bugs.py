"""SmartNoise Synth with a privacy bug injected, for the audit's corpus: run as the adapter's command in its own
environment (``.venv-smartnoise``) with ``params: {bug: NAME}``; each bug patches the library for the call and
is removed after it (the patches wrap SmartNoise's own functions; none of its code is copied here).

- ``mst_half_noise``: MST adds Gaussian noise of half the σ its measurements declare;
- ``mst_free_selection``: MST picks each marginal by the best score on the data, with no noise (the exponential
  mechanism's budget still "spent" on paper);
- ``aim_forgets_a_round``: AIM's first round does not count its cost against the budget, so it runs one round
  more than it can pay for."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "synth" / "adapters"))

import numpy as np  # noqa: E402

import smartnoise_synth as adapter  # noqa: E402
from contract import serve  # noqa: E402


def _patches(bug: str) -> list[tuple[object, str, object]]:
    """(owner, attribute, replacement) for ``bug``."""
    if bug == "mst_half_noise":
        import snsynth.mst.mst as mst

        noise = mst.gaussian_noise
        return [(mst, "gaussian_noise", lambda sigma, size=None: noise(sigma / 2, size))]
    if bug == "mst_free_selection":
        from snsynth.mst.mst import MSTSynthesizer

        return [(MSTSynthesizer, "exponential_mechanism",
                 lambda self, q, eps, sensitivity, prng=np.random, monotonic=False: int(np.argmax(q)))]
    if bug == "aim_forgets_a_round":
        from snsynth.aim.aim import AIMSynthesizer

        rounds, worst = AIMSynthesizer.AIM, AIMSynthesizer._worst_approximated
        state = {"first": False}

        def fit(self, data, workload):  # each fit forgets its first round
            state["first"] = True
            return rounds(self, data, workload)

        def forgetful(self, candidates, answers, model, eps, sigma):
            if state["first"]:  # this round's cost was added to what is used: give it back to the budget
                state["first"] = False
                self.rho += eps ** 2 / 8 + 0.5 / sigma ** 2
            return worst(self, candidates, answers, model, eps, sigma)
        return [(AIMSynthesizer, "AIM", fit), (AIMSynthesizer, "_worst_approximated", forgetful)]
    raise ValueError(f"unknown bug {bug!r}")


def release(persons, cells, domain, epsilon, runs, seed, relation, bug: str = "", **params):
    patches = _patches(bug) if bug else []
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        return adapter.release(persons, cells, domain, epsilon, runs, seed, relation, **params)
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


if __name__ == "__main__":
    serve(release)
