"""Words shared by the release report, the decision and the terminal: how a setting is named, which way
protection goes, persons with their denominators, advice on units. Imports nothing of the release package."""

from __future__ import annotations

import pandas as pd

from censusrecon.experiments.metrics import PLAN_MAX_UNITS
from censusrecon.synth import registry


def setting_label(mechanism: str, value: float) -> str:
    """'ε = 2', 'swap rate 10%', 'exact tables'; a file made elsewhere: its declared ε, or 'as released'.

    >>> setting_label("file:agency", 2.0), setting_label("file:agency", 0.0), setting_label("swapping", 0.1)
    ('ε = 2 (declared)', 'as released', 'swap rate 10%')
    """
    return registry.label(mechanism, value)


def more_protective(mechanism: str) -> str:
    """Which way the settings protect more, for a plan: 'larger swap rates', 'smaller ε', ..."""
    return registry.mechanism(mechanism).more_protective if registry.is_mechanism(mechanism) else "smaller ε"


def less_protective(mechanism: str) -> str:
    return registry.mechanism(mechanism).less_protective if registry.is_mechanism(mechanism) else "larger ε"


def persons_words(x) -> str:
    """'43 of 337 persons unique in D (650 in D)': persons reconstructed with their denominators."""
    unique = f" of {int(x['unique_in_d'])} persons unique in D" if "unique_in_d" in x and pd.notna(
        x.get("unique_in_d")) else ""
    return f"{int(x['persons'])}{unique} ({int(x['persons_in_d'])} persons in D)"


def units_advice(need: int | None, have: int, available: int | None, what: str) -> str:
    """'about 14 units would show ε = 2 safe (6 evaluated; …)', never more units than the file has: then
    'this file cannot decide …: a stronger attack or a larger tolerance would'.

    >>> units_advice(24, 3, 6, "show ε = 2 safe")
    'this file cannot show ε = 2 safe at this tolerance: about 24 units would be needed and it has 6; a stronger attack or a larger tolerance could'
    >>> units_advice(5, 3, 6, "show ε = 2 safe")
    'about 5 units would show ε = 2 safe (3 evaluated of the 6 in the file; target.units: all evaluates every one)'
    """
    if need is None:
        return ""
    if available is not None and need > available:
        many = f"more than {PLAN_MAX_UNITS:,}" if need > PLAN_MAX_UNITS else f"about {need}"
        return (f"this file cannot {what} at this tolerance: {many} units would be needed and it has {available}; a "
                "stronger attack or a larger tolerance could")
    if need > PLAN_MAX_UNITS:
        return f"more than {PLAN_MAX_UNITS:,} units would {what}"
    where = (f" ({have} evaluated of the {available} in the file; target.units: all evaluates every one)"
             if available is not None and have < available else f" ({have} evaluated)")
    return f"about {need} units would {what}" + where


def fit_words(fit: bool | None, short: bool = False) -> str:
    """Whether a release's backend is fit for publication: yes, no, or (None: a file or program made
    elsewhere) the agency's, not checked here.

    >>> fit_words(True), fit_words(None), fit_words(None, short=True)
    ('yes', "the agency's (not checked)", "the agency's")
    """
    if fit is None:
        return "the agency's" if short else "the agency's (not checked)"
    return "yes" if fit else "no"
