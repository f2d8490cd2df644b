"""Every release mechanism as one value in one registry: its name, its setting, whether it is DP, what it
publishes, how it publishes and how the audit must check it. Nothing outside this module decides by a
mechanism's name.

A new mechanism is one function from :class:`synth.publishing.ReleaseInputs` to
:class:`synth.publishing.Published` and one call of :func:`register`:

>>> kind = MechanismKind("rounded", "Rounding to a base", publish=lambda inputs: None, dp=False, setting="base",
...                      settings_word="bases", not_dp="rounding is not differentially private")
>>> kind.label(5), kind.more_protective
('base 5', 'larger bases')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.by_name import Registry
from censusrecon.synth import publishing as p
from censusrecon.synth.cellkey import NOT_DP as CELL_KEY_NOT_DP
from censusrecon.synth.swapping import NOT_DP as SWAPPING_NOT_DP
from censusrecon.synth.swapping import TARGETED_NOT_DP

#: a release made outside censusrecon is named file:<name> in the results; a program run by it program:<name>
FILE_PREFIX = "file:"
PROGRAM_PREFIX = "program:"
#: the pseudo-releases of an evaluation's results: the exact tables, and the baselines that see no release
EXACT = "exact"
BASELINE = "baseline"


class UnknownMechanism(CensusReconError, ValueError):
    """A name no mechanism is registered under."""


@dataclass(frozen=True)
class MechanismKind:
    """One release mechanism.

    Args:
        name: its name in configs and results.
        title: how a sentence names it ("Swapping").
        publish: ``ReleaseInputs -> Published``, the one code path that publishes it.
        dp: differentially private (audited at each ε) or not (its settings protect more as they grow).
        setting: what one setting is called ("ε", "swap rate").
        settings_word: what several are called ("ε", "swap rates").
        percent: settings are shares, shown as percentages.
        symbol: its setting's symbol on a plot ("V" for the cell key method's variance; default ε, or the name).
        settings_field: the release config's field listing its settings ("epsilons", "swap_rates",
            "cell_key.variances"); None: ``release.settings[name]``.
        options_field: the release config's section given to ``publish`` as ``options`` (None:
            ``release.options[name]``).
        rows: it publishes a microdata file besides tables (anonymeter measures its risks).
        relations: the neighbouring relations it is DP under.
        uses: the declared invariants its release really publishes (``unit_total``, ``root_total``;
            ``occupied_blocks`` wherever blocks are published).
        noise: how the exact attack fits its tables: ``laplace`` (independent Laplace noise of the record's
            scale: the least-deviation fit) or ``consistent`` (the exact count model).
        audit: the name of the audit family that checks it (a value of :mod:`synth.audit.families`: built in,
            ``tables``, ``fitted_tables``, ``histogram``, ``smoothed``, ``tree``: TopDown's, over a root's whole
            tree; or one a new noise law registers); None for a mechanism that is not DP. A name no family has is
            refused when the audit looks it up.
        scope: ``unit`` (one release per unit) or ``root`` (one release of a tree shared by its units, whose
            share ``ReleaseInputs.shared`` gives).
        study_only: why its releases are never fit for publication, whatever the noise backend.
        not_dp: for one that is not DP, why (the ledger's and the report's words).
        made_with: what draws its randomness, for the ledger of one that is not DP.
        needs_pool: it swaps with persons of another area (``ReleaseInputs.pool``).
        needs_fit: it fits rows by RAP (``ReleaseInputs.rap`` and ``key``).
        needs_tables: it publishes census tables only (the first workload is ``kind: tables``).
        fitted_to: the mechanism whose tables it fits (post-processing of them: audited as they are).
        draws: how the informed membership game draws its releases in batches: ``counts`` (its noisy counts of
            the cells asked, each release numbered), ``fitted`` (each release's rows fitted in shared calls),
            ``histogram`` (a noisy count of every record of the domain), ``keys`` (rows drawn, as record keys);
            None: it has no batch path (the game says so).
    """

    name: str
    title: str
    publish: Callable[[p.ReleaseInputs], p.Published]
    dp: bool = True
    setting: str = "ε"
    settings_word: str = "ε"
    percent: bool = False
    symbol: str | None = None
    settings_field: str | None = "epsilons"
    options_field: str | None = None
    rows: bool = False
    relations: tuple[str, ...] = ("replace_one", "add_remove")
    uses: frozenset[str] = frozenset()
    noise: Literal["laplace", "consistent"] = "consistent"
    audit: str | None = None
    scope: Literal["unit", "root"] = "unit"
    study_only: str | None = None
    not_dp: str | None = None
    made_with: str = "numpy (seeded)"
    needs_pool: bool = False
    needs_fit: bool = False
    fitted_to: str | None = None
    needs_tables: bool = False
    draws: Literal["counts", "fitted", "histogram", "keys"] | None = None

    def __post_init__(self):
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"a mechanism's name is letters, digits and _, got {self.name!r}")
        if self.dp and self.not_dp:
            raise ValueError(f"mechanism {self.name!r}: a DP mechanism has no not_dp reason")
        if not self.dp and not self.not_dp:
            raise ValueError(f"mechanism {self.name!r}: say why it is not DP (not_dp)")
        if not self.dp and self.audit is not None:
            raise ValueError(f"mechanism {self.name!r} is not DP: there is no ε to audit")
        if self.dp and not (isinstance(self.audit, str) and self.audit.replace("_", "").isalnum()):
            raise ValueError(f"mechanism {self.name!r} is DP: name the audit family that checks what it publishes "
                             "(audit=the name of a family of synth.audit.families: tables, fitted_tables, histogram, "
                             f"smoothed, tree, or one registered with register_family), got {self.audit!r}")
        if self.audit == "fitted_tables" and not self.fitted_to:
            raise ValueError(f"mechanism {self.name!r} is audited as a file fitted to noisy tables: say whose "
                             "(fitted_to)")

    def label(self, value: float) -> str:
        """'ε = 2', 'swap rate 10%', 'ptable variance 2'."""
        return f"{self.setting} {100 * value:g}%" if self.percent else (
            f"ε = {value:g}" if self.dp else f"{self.setting} {value:g}")

    def short(self, value: float) -> str:
        """A plot's label of a setting: 'ε=2', '10%', 'V=2'."""
        if self.percent:
            return f"{100 * value:g}%"
        return f"{'ε' if self.dp else self.symbol or self.setting}={value:g}"

    @property
    def more_protective(self) -> str:
        """Which way its settings protect more: 'smaller ε', 'larger swap rates'."""
        return "smaller ε" if self.dp else f"larger {self.settings_word}"

    @property
    def less_protective(self) -> str:
        return "larger ε" if self.dp else f"smaller {self.settings_word}"

    @property
    def setting_key(self) -> str:
        """The ledger's key for its setting: epsilon, swap_rate, ptable_variance."""
        return "epsilon" if self.dp else self.setting.replace(" ", "_")

    def fit_note(self, backend) -> tuple[bool, str]:
        """Whether a release made with ``backend`` is fit for publication, and why."""
        if not self.dp:
            return False, self.not_dp
        if self.study_only:
            return False, self.study_only
        if backend is not None and backend.for_publication:
            return True, f"{backend.name} discrete Laplace (vetted sampler)"
        return False, "seeded simulation noise: for studies, not for publication"


MECHANISMS: Registry[MechanismKind] = Registry("mechanism", MechanismKind, UnknownMechanism)


def register(kind: MechanismKind, replace: bool = False, built_in: bool = False) -> MechanismKind:
    """Add a mechanism (:meth:`microdata.by_name.Registry.register`). A DP one added after the built-in ones must
    name a registered audit family (:mod:`synth.audit.families`, loaded here only then); the built-in ones' are
    checked by a test, so that checking a config never loads the audit."""
    if kind.dp and not built_in:
        from censusrecon.synth.audit.families import family

        try:
            family(kind.audit)
        except CensusReconError as e:
            raise ValueError(f"mechanism {kind.name!r} is DP: {e}") from None
    return MECHANISMS.register(kind, replace=replace, built_in=built_in)


unregister = MECHANISMS.unregister
#: the mechanism registered under a name; an error naming the registered ones otherwise
mechanism = MECHANISMS.get
names = MECHANISMS.names


def is_mechanism(name: str) -> bool:
    return name in MECHANISMS


def is_file(name: str) -> bool:
    """A release made outside censusrecon, given as a file (``file:<name>``)."""
    return name.startswith(FILE_PREFIX)


def is_program(name: str) -> bool:
    """A release program run by censusrecon as a black box (``program:<name>``)."""
    return name.startswith(PROGRAM_PREFIX)


def is_dp(name: str) -> bool:
    """A release whose settings are ε (a DP mechanism, a program run at each ε); not a mechanism that is not
    DP; a file: whatever it declares, so True."""
    return not (name in MECHANISMS and not MECHANISMS.get(name).dp)


def label(name: str, value: float) -> str:
    """'ε = 2', 'swap rate 10%', 'exact tables'; a file made elsewhere: its declared ε, or 'as released'.

    >>> label("file:agency", 2.0), label("file:agency", 0.0), label("swapping", 0.1), label("exact", float("inf"))
    ('ε = 2 (declared)', 'as released', 'swap rate 10%', 'exact tables')
    """
    if name == EXACT or value == float("inf"):
        return "exact tables"
    if is_file(name):
        return f"ε = {value:g} (declared)" if value > 0 else "as released"
    return MECHANISMS.get(name).label(value) if name in MECHANISMS else f"ε = {value:g}"


BUILT_IN = (
    MechanismKind("laplace_tables", "Laplace tables", p.publish_laplace_tables, uses=frozenset({"unit_total"}),
                  noise="laplace", audit="tables", draws="counts"),
    MechanismKind("synthetic", "Synthetic microdata", p.publish_synthetic, rows=True, uses=frozenset({"unit_total"}),
                  audit="fitted_tables", needs_fit=True, fitted_to="laplace_tables", draws="fitted"),
    MechanismKind("perturbed_histogram", "The perturbed histogram", p.publish_perturbed_histogram, audit="histogram",
                  draws="histogram"),
    MechanismKind("smoothed_histogram", "The smoothed histogram", p.publish_smoothed_histogram, rows=True,
                  relations=("replace_one",), audit="smoothed", draws="keys",
                  study_only="numpy sampling whatever the backend: a study mechanism, not for publication"),
    MechanismKind("topdown", "TopDown", p.publish_shared, rows=True, uses=frozenset({"root_total"}), audit="tree",
                  scope="root", options_field="topdown", needs_tables=True),
    MechanismKind("swapping", "Swapping", p.publish_swapping, dp=False, setting="swap rate",
                  settings_word="swap rates", percent=True, settings_field="swap_rates", options_field="swap_match",
                  rows=True, not_dp=SWAPPING_NOT_DP),
    MechanismKind("cell_key", "The cell key method", p.publish_cell_key, dp=False, setting="ptable variance",
                  settings_word="ptable variances", symbol="V", settings_field="cell_key.variances", options_field="cell_key",
                  not_dp=CELL_KEY_NOT_DP),
    MechanismKind("targeted_swapping", "Targeted swapping", p.publish_targeted_swapping, dp=False,
                  setting="swap rate", settings_word="swap rates", percent=True, settings_field="targeted_swap.rates",
                  options_field="targeted_swap", rows=True, not_dp=TARGETED_NOT_DP, needs_pool=True),
)
for _kind in BUILT_IN:
    register(_kind, built_in=True)
BUILT_IN = tuple(k.name for k in BUILT_IN)
