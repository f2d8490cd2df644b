"""The release section of an experiment's config: what to publish, how, and how to audit it (pydantic; unknown
keys are errors). The defence's settings, beside the defence; ``experiments.config.ExperimentConfig`` holds them
under ``release`` (and re-exports these names)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from censusrecon.microdata.data_settings import Strict
from censusrecon.synth import registry
from censusrecon.synth.mechanism import MIN_EPSILON
from censusrecon.synth.registry import FILE_PREFIX, PROGRAM_PREFIX


class ToleranceConfig(Strict):
    """What the publication board accepts: persons reconstructed by the best attack beyond the best
    guess without the release, per unit. A setting is called safe only when the one-sided upper 95%
    limit of that excess across units is below the tolerance (an equivalence test); give one of the
    two forms. The excess is measured in the form's own terms: each unit's share of its own persons
    unique in D, or persons."""

    share_of_unique: float | None = Field(
        0.01, gt=0, le=1, description="the tolerance as a share of each unit's persons unique in D (default 1%: "
        "a unit of 500 persons unique in D tolerates 5 more persons reconstructed than the best guess finds); "
        "each unit's excess is taken as a share of its own unique persons and their mean over units is tested")
    per_unit: float | None = Field(None, gt=0, description="the tolerance in persons per unit, the same for every "
                                                           "unit (replaces the default share_of_unique)")
    membership_advantage: float = Field(
        0.02, description="the realistic membership attack's advantage tolerated: its TPR minus its FPR at the "
        "rule's FPR (release.inference.fpr), above the 0 a guess without the release gets; safe means its upper "
        "one-sided 95% limit is below this")
    attribute: float = Field(
        0.02, description="attribute inference's accuracy tolerated above the best guess from outside data (a "
        "share of persons); safe means the upper one-sided 95% limit of the excess is below this")
    informed_membership: float | None = Field(
        None, description="the informed adversary's advantage tolerated (TPR minus FPR at the rule's FPR). Unset (the "
        "default): its row is shown and decides nothing; set, it decides as the realistic attacks do. The informed "
        "adversary knows every record but the target's, as DP's definition assumes")

    @field_validator("membership_advantage", "attribute", "informed_membership")
    @classmethod
    def _not_negative(cls, v, info):
        if v is not None and not 0 <= v < 1:
            raise ValueError(f"release.tolerance.{info.field_name} is a share in [0, 1), got {v:g}: give e.g. 0.02 "
                             "for 2 percentage points")
        return v

    @model_validator(mode="before")
    @classmethod
    def _per_unit_replaces_the_default(cls, data):
        if isinstance(data, dict) and data.get("per_unit") is not None and "share_of_unique" not in data:
            data = {**data, "share_of_unique": None}
        return data

    @model_validator(mode="after")
    def _one(self):
        if (self.share_of_unique is None) == (self.per_unit is None):
            raise ValueError("release.tolerance takes exactly one of share_of_unique and per_unit")
        return self

    def words(self) -> str:
        """'1% of persons unique in D' or '2 persons per unit'."""
        if self.per_unit is not None:
            return f"{self.per_unit:g} person{'s' if self.per_unit != 1 else ''} per unit"
        return f"{100 * self.share_of_unique:g}% of persons unique in D"


class AuditConfig(Strict):
    """The empirical ε audit of every mechanism, run on the code that publishes."""

    epsilons: Literal["all", "extremes"] | list[float] = Field(
        "all", description="audit every ε of release.epsilons (the default: a decision to publish names only an ε "
        "the audit checked), only the smallest and the largest, or these ε of release.epsilons")
    runs: int = Field(100_000, ge=1000, description="releases on each of the two neighbouring inputs")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="the least confidence of every statistical check")
    false_alarm: float = Field(0.001, gt=0, lt=0.5, description="the chance that an audit of correct mechanisms "
                               "fails, at most: every check runs at 1 - false_alarm / (the audit's number of checks); "
                               "0.1% keeps the measured rate's upper 95% limit below 1% (bench/audit_false_alarm.py)")
    seed: int | None = Field(None, description="the audit's noise key; unset: a fresh one each audit, recorded in "
                             "audit.json (a re-run under another seed is a new audit, recorded as such)")
    whole_releases: int = Field(100, ge=20, description="whole releases of every audited unit (TopDown: of its "
                                "production tree) for the checks over the whole output: noise scale per node, table "
                                "and band of true counts, shape and far tail, independence across cells and releases")
    replay_pairs: int = Field(50, ge=1, description="neighbouring pairs of the real data (persons moved between "
                              "blocks and areas, types changed, added or removed) for the post-processing replay")
    replay_draws: int = Field(2, ge=1, description="recorded releases each replay pair is replayed with")
    replay_far: int = Field(3, ge=0, description="datasets far from the real data (as many persons per unit; under "
                            "TopDown as many under the root, spread over its units at random; every attribute and "
                            "block drawn at random) also replayed: post-processing may read nothing "
                            "but the measurements and the public facts, so any data must give the same output; a "
                            "tie broken or a rounding steered by the true counts shows at once")
    backend: Literal["local", "ray"] = Field(
        "local", exclude=True, description="where `censusrecon audit` runs the audit unless --backend says: local (one "
        "process) or ray (each (BLOCK variant, ε, mechanism or program) a task on a local Ray cluster of sweep.num_cpus "
        "CPUs: the same results); not part of the config's digest")
    canary: dict[str, str | int] | None = Field(
        None, description="the worst-case record a synthesizer's whole releases are audited with, by attribute (e.g. "
        "{AGE: 97, RACE: Native Hawaiian and Other Pacific Islander alone}): each a value of that attribute's domain; "
        "those left out, and the type when none is given, are the rarest in the unit's data (a region it leaves empty)")
    units: Literal["all"] | int = Field("all", description="the units audited: all released units (the default: "
                                        "a decision to publish covers only what was audited), or a sample of this "
                                        "many (at least 4): the smallest, the median, the largest and one drawn with "
                                        "the audit's seed, then the rest drawn likewise; the decision then covers the "
                                        "sampled units only, and says so")

    @field_validator("units")
    @classmethod
    def _cover(cls, v):
        if v != "all" and v < 4:
            raise ValueError(f"release.audit.units: {v} cannot cover the units' size range; give at least 4 (the "
                             "smallest, the median, the largest and a random one) or 'all'")
        return v


class InferenceConfig(Strict):
    """The inference attacks run on every release (reconstruct/inference.py): membership by the informed and the
    realistic adversary, and attribute inference by linear reconstruction."""

    run: bool = Field(True, description="run them (false: they are not run, and no release can be published, since "
                      "a decision rests on its strongest attacks)")
    informed_targets: int = Field(8, ge=2, description="targets of the informed adversary per unit: half drawn at "
                                  "random, half the most atypical persons under the outside data")
    informed_releases: int = Field(250, ge=20, description="releases drawn with the target's record and as many "
                                   "without it, per target, for a release whose noise is drawn in batches (noisy "
                                   "tables, histograms)")
    informed_fits: int = Field(8, ge=2, description="the same for a release that fits rows to its tables (synthetic): "
                               "each release is a fit, so fewer")
    program_releases: int = Field(50, ge=10, description="the same for a release program that declares its noise law; "
                                  "each call is the program's own")
    slow_units: int = Field(1, ge=0, description="the first units on which the informed game is played for a release "
                            "slow to draw again (a fit or a program's call each); every unit for the others")
    secret: str | None = Field(None, description="attribute inference's secret: an attribute of the data (default "
                               "RACE where there is one, else the last attribute)")
    atypical: float = Field(0.1, gt=0, le=0.5, description="the share of persons, the least typical under the outside "
                            "data, reported apart as the atypical targets")
    fpr: float = Field(0.01, description="the false-positive rate the rule reads the membership attacks at (DP's "
                       "bound is shown beside them)")

    @field_validator("fpr")
    @classmethod
    def _fpr(cls, v):
        if not 0 < v < 1:
            raise ValueError(f"release.inference.fpr is a false-positive rate in (0, 1), got {v:g}: give e.g. 0.01")
        return v


class TopDownConfig(Strict):
    """The TopDown-style release: its root level, and each level's share of ε (default: the 2020
    production shares for persons, renormalised over the levels from the root down)."""

    root: str = Field("county", description="the level whose unit around each target is the release's root")
    shares: dict[str, float] | None = Field(None, description="budget share per level, e.g. {county: 1, tract: 2}")
    detailed_share: float = Field(0.25, gt=0, lt=1, description="each level's share of its budget for the detailed "
                                  "histogram (every person type); the rest measures the tables")
    accounting: Literal["pure", "zcdp"] = Field(
        "pure", description="pure: discrete Laplace, pure ε-DP; zcdp: discrete Gaussian under zero-concentrated DP, "
                            "as 2020 production, with the ρ that converts to (ε, delta)")
    delta: float = Field(1e-10, gt=0, lt=1, description="zcdp: the δ of the (ε, δ) each ε of the grid means")
    solver: Literal["clarabel", "highs", "osqp"] = Field(
        "clarabel", description="QP solver of the estimation (bench/run.py compares them)")


class ReleaseFileConfig(Strict):
    """A release made outside censusrecon, evaluated as it is: noisy tables in the declared tables'
    layout (``censusrecon release-template`` writes it) or microdata in the person file's columns
    and codes. It covers every person of its units, so it needs ``target.whole_units: true``."""

    name: str = Field(pattern=r"^[A-Za-z0-9_]+$", description="the release's name in the results (as file:<name>); "
                      "several files of one name are one release at several ε")
    kind: Literal["tables", "microdata"] = Field(
        "tables", description="tables: one row a published cell (unit, table, cell, geography, value); microdata: one "
        "row a person, the person file's columns and codes (data.source: table)")
    path: str = Field(description="CSV or Parquet (by extension), relative to the config's folder")
    epsilon: float | None = Field(None, gt=0, description="the ε the agency declares it was made at (recorded as "
                                  "declared: a file cannot be audited; null: not DP, evaluated as released)")
    made_with: str = Field("", description="how it was made (library, mechanism, settings), for the report")


class ProgramMeasurementsConfig(Strict):
    """A program's first measurements, audited on their own: the step of a synthesizer (MST, AIM) that
    adds Gaussian noise to every column's one-way marginal. The program, given ``params`` besides its
    own, returns those measurements for one-way cells (one value of one attribute at the unit, or
    one block); cheap enough to run ``runs`` times per neighbour, where a whole release (a fit) is not."""

    params: dict = Field(default_factory=lambda: {"stage": "measurements"}, description="given to the program "
                         "besides its own params to have it return its first measurements")
    runs: int = Field(300, ge=50, description="measurements per neighbour")
    share: float = Field(gt=0, le=1, description="the share of the program's zCDP ρ its design spends on them: ρ from "
                         "the declared ε and delta by OpenDP's conversion (MST: 1/3, McKenna et al. 2021; AIM: 0.9/16 "
                         "with its default 16·d rounds, McKenna et al. 2022)")
    delta: float = Field(gt=0, lt=1, description="the δ of the program's (ε, δ) accounting (the program's own "
                         "params.delta, if it has one, must be the same)")


class ProgramSpendingConfig(Strict):
    """A synthesizer's privacy ledger, recorded as real fits of the unit run: its adapter, given ``params``
    besides its own, returns per fit what every Gaussian measurement and every selection by the exponential
    mechanism spent (synth/audit/spending.py's LEDGER). The audit checks the spending against the ρ the
    synthesizer declares and OpenDP's conversion, the measurements' noise against the σ they declare, and the
    selections against their law; with it, the program's whole releases are drawn for D and its worst-case
    neighbour only (a canary: a person of a type nobody of D has, in the block with fewest persons), on the first
    ``whole_units`` units, for the empirical bound."""

    params: dict = Field(default_factory=lambda: {"stage": "spending"}, description="given to the program besides its "
                         "own params to have it return its spending ledger")
    runs: int = Field(3, ge=1, description="fits of the unit's D per ε whose every step is recorded")
    whole_units: int = Field(1, ge=0, description="the first units of the audit on which whole releases are drawn too "
                             "(audit_runs of D and of its canary neighbour, each a fit: the empirical bound); the "
                             "ledger alone on the others")
    delta: float = Field(gt=0, lt=1, description="the δ of the program's (ε, δ) accounting (the program's own "
                         "params.delta, if it has one, must be the same)")


class ProgramPostProcessingConfig(Strict):
    """A program that post-processes its noisy measurements (rakes them to a noisy total, rounds, makes them
    consistent), declared so that the audit checks each step for what it is. Given ``measure`` besides its own params,
    the program returns its noisy measurements of every published cell before any post-processing (a release's shape;
    their noise follows the declared law). Given ``post`` besides its own params, ``measurements`` (one release's, a
    list of numbers) and no persons at all, it returns what it would publish from them. The audit checks the law on
    the measurements, never on the published output, and that a release is exactly the post-processing of the
    measurements drawn with the same seed (``replays`` seeds): so the output depends on the data only through them."""

    measure: dict = Field(default_factory=lambda: {"stage": "measure"}, description="given to the program besides its "
                          "own params to have it return its noisy measurements of every published cell")
    post: dict = Field(default_factory=lambda: {"stage": "post"}, description="given to the program besides its own "
                       "params, with the measurements (params.measurements) and no persons, to have it post-process them")
    replays: int = Field(5, ge=1, description="seeds whose release is checked to be the post-processing of the "
                         "measurements drawn with the same seed")


class ReleaseProgramConfig(Strict):
    """A release program made outside censusrecon, run by it over the ε grid, attacked and audited as
    a black box. The contract (docs: Evaluate your own release): ``release(persons, cells, domain,
    epsilon, runs, seed, relation, **params)`` returns ``runs`` independent releases, one value per
    row of ``cells``; a command is started once with ``--serve`` and gets the same as files, one job
    per line of standard input, and writes a .npy array for each (synth/adapters/contract.py)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_]+$", description="the release's name in the results (as program:<name>)")
    function: str | None = Field(None, description="module:function, or path/to/file.py:function (relative to the "
                                 "config's folder), called in this process")
    command: list[str] | None = Field(None, description="the command that runs the program in its own environment, "
                                      "e.g. [.venv-tumult/bin/python, adapters/tumult_tables.py] (relative paths from "
                                      "the config's folder); the contract's arguments are appended")
    params: dict = Field(default_factory=dict, description="passed to the program as they are (its own settings)")
    noise: Literal["laplace", "gaussian"] | None = Field(
        None, description="the noise family the program declares (independent noise on each cell's count): the audit "
        "then also checks the noise's scale and shape from output minus truth; null: the statistical bound alone")
    delta: float | None = Field(None, description="noise: gaussian: the δ of the (ε, δ) each ε of the "
                                "grid means (default params.delta); the audit checks its noise against the zCDP ρ "
                                "that OpenDP's conversion gives for them")
    audit_runs: int | None = Field(None, ge=2, description="releases per neighbour in its audit (default "
                                   "release.audit.runs); each is a whole release of the unit. Few runs reach only a "
                                   "small ε: the audit says how far (bound_power). At least 10, or 2 for a synthesizer "
                                   "audited by its spending ledger (its whole releases certify no ε: the ledger decides)")
    measurements: ProgramMeasurementsConfig | None = Field(
        None, description="audit also the program's first (Gaussian) measurements, many times: for a synthesizer "
        "whose whole releases are too slow to audit with power")
    spending: ProgramSpendingConfig | None = Field(
        None, description="audit the synthesizer where its privacy is spent: every measurement and selection of real "
        "fits, recorded (synth/audit/spending.py)")
    pair_units: int | None = Field(None, ge=1, description="the first units of the audit on which its neighbours' "
                                   "releases are drawn too (the black box); on the others D's releases alone, whose "
                                   "noise the white box and the law checks read at each neighbour's moved cells. For a "
                                   "program slow to call (a Spark job); null: every unit. Needs noise")
    post_processing: ProgramPostProcessingConfig | None = Field(
        None, description="the program post-processes noisy measurements: it returns them when asked (measure), and "
        "post-processes given ones without the data (post); the audit checks the noise law on the measurements and that "
        "each release is their post-processing")
    calls: Literal["single", "batch"] = Field(
        "single", description="how the audit calls it. single: one release per call, each call with a seed of its own, "
        "as publication calls it; batch: audit_runs releases per call (for a program too slow to start once per "
        "release, e.g. a Spark session), and single_runs releases of the unit one per call besides, whose noise must "
        "be the same law as the batches' (a program that behaves differently when asked for one release fails)")
    single_runs: int = Field(50, ge=5, description="calls: batch: the releases drawn one per call (each its own seed) "
                             "beside the batches (each release's mean noise over its cells is compared with the "
                             "batches': 5 tell a halved noise apart)")
    single_units: int | None = Field(None, ge=1, description="calls: batch: the first units of the audit on which those "
                                     "releases one per call are drawn (the call-shape and seed checks); null: every unit. "
                                     "For a program slow to call (a Spark job each), whose call shape and use of its "
                                     "seed do not depend on the unit")

    @model_validator(mode="after")
    def _one(self):
        if (self.function is None) == (self.command is None):
            raise ValueError(f"release.programs {self.name!r}: give exactly one of function and command")
        if self.function is not None and ":" not in self.function:
            raise ValueError(f"release.programs {self.name!r}: function is module:function or file.py:function, got "
                             f"{self.function!r}")
        if self.noise == "gaussian" and self.delta_of() is None:
            raise ValueError(f"release.programs {self.name!r}: Gaussian noise spends a zCDP ρ that depends on the δ of "
                             "its (ε, δ): give release.programs[].delta (or params.delta)")
        if self.audit_runs is not None and self.audit_runs < 10 and self.spending is None:
            raise ValueError(f"release.programs {self.name!r}: audit_runs {self.audit_runs} certifies nothing; give at "
                             "least 10 (fewer only for a synthesizer audited by its spending ledger)")
        if self.pair_units is not None and self.noise is None:
            raise ValueError(f"release.programs {self.name!r}: pair_units leaves the units past it with no neighbour "
                             "drawn, audited by their noise's law alone: give noise (laplace or gaussian)")
        if self.post_processing is not None and self.noise is None:
            raise ValueError(f"release.programs {self.name!r}: post_processing declares noisy measurements whose law the "
                             "audit checks: give noise (laplace or gaussian), the law they follow")
        if self.delta_of() is not None and not 0 < self.delta_of() < 1:
            raise ValueError(f"release.programs {self.name!r}: an (ε, δ) states its ε only at a δ in (0, 1), got δ = "
                             f"{self.delta_of()}: set delta (or params.delta) to the program's δ, e.g. 1e-9")
        if self.delta is not None and "delta" in self.params and float(self.params["delta"]) != self.delta:
            raise ValueError(f"release.programs {self.name!r}: params.delta ({self.params['delta']}) and delta "
                             f"({self.delta}) must be the same δ")
        for key in ("measurements", "spending"):
            m = getattr(self, key)
            if m is not None and "delta" in self.params and float(self.params["delta"]) != m.delta:
                raise ValueError(f"release.programs {self.name!r}: params.delta ({self.params['delta']}) and "
                                 f"{key}.delta ({m.delta}) must be the same δ")
        return self

    def delta_of(self) -> float | None:
        """The δ of its (ε, δ): ``delta``, else ``params.delta``."""
        return self.delta if self.delta is not None else (
            float(self.params["delta"]) if "delta" in self.params else None)


class CellKeyConfig(Strict):
    """The cell key method (ABS; ONS 2021): record keys, a perturbation table of maximum perturbation D and
    variance V (one setting per variance), the same perturbation for a cell in every table. Not DP."""

    max_perturbation: int = Field(3, ge=1, le=20, description="D: no count moves by more than this")
    variances: list[float] = Field([0.5, 1.0, 2.0], description="the perturbation table's variance V, each a "
                                   "setting (larger: more protective); a count too small for V gets the most it can")
    key_range: int = Field(256, ge=3, description="record keys are 0 … key_range - 1; a cell's key is their sum "
                           "modulo this")

    @model_validator(mode="after")
    def _check(self):
        if not self.variances or any(not v > 0 for v in self.variances) or self.key_range < 2 * self.max_perturbation + 1:
            raise ValueError(f"release.cell_key: variances must be positive and key_range at least 2·max_perturbation "
                             f"+ 1, got {self.variances}, {self.key_range}")
        return self


class TargetedSwapConfig(Strict):
    """Targeted record swapping (ONS 2021's manner): records at risk swapped first with matching records
    of another area of the enclosing unit, then others at random, up to each rate. Not DP."""

    rates: list[float] = Field([0.02, 0.1], description="share of the unit's records swapped, each a setting (the ONS "
                               "reports 7% to 10% of households for 2021)")
    risk: list[str] | None = Field(None, description="attributes a record is at risk on (default: every attack "
                                   "attribute but BLOCK)")
    threshold: int = Field(1, ge=1, description="at risk: at most this many persons of the block share the record's "
                           "risk attributes (1: unique in its block)")
    match: list[str] = Field(["SEX", "AGE"], description="a partner from the other area matches on these (AGE by "
                             "P12 age group)")

    @model_validator(mode="after")
    def _check(self):
        if not self.rates or any(not 0 < r <= 1 for r in self.rates):
            raise ValueError(f"release.targeted_swap.rates must be shares in (0, 1], got {self.rates}")
        return self


class ReleaseConfig(Strict):
    """The defence: which releases to evaluate (DP at each ε; swapping at each swap rate), under which
    neighbouring relation."""

    epsilons: list[float] = Field([0.1, 0.3, 1.0, 3.0, 10.0], description="the ε of each release evaluated (each "
            "mechanism but swapping)")
    mechanisms: list[str] = Field(
        ["laplace_tables", "synthetic", "perturbed_histogram", "smoothed_histogram"], description="the releases "
        "evaluated side by side, by their names in synth.registry: noisy tables (laplace_tables), synthetic microdata "
        "fitted to them, the perturbed and smoothed histograms, TopDown (2020's), record swapping (2010's, not DP), "
        "the cell key method and targeted record swapping (ONS 2021's, not DP), and any mechanism registered")
    settings: dict[str, list[float]] = Field(default_factory=dict, description="a registered mechanism's settings "
                                             "when it has no field of its own here: {name: [setting, ...]}")
    options: dict[str, dict] = Field(default_factory=dict, description="a registered mechanism's own options when "
                                     "it has no section of its own here: {name: {...}}, given to it as they are")
    swap_rates: list[float] = Field([0.02, 0.1, 0.5], description="swapping: share of records swapped, each a setting")
    swap_match: list[str] = Field(["SEX", "AGE"], description="swapping: pairs match on these (AGE by P12 age group)")
    cell_key: CellKeyConfig = CellKeyConfig()
    targeted_swap: TargetedSwapConfig = TargetedSwapConfig()
    topdown: TopDownConfig = TopDownConfig()
    relation: Literal["replace_one", "add_remove"] = Field(
        "replace_one", description="the neighbouring datasets ε protects against: one person replaced (n public) or "
                "one added or removed")
    backend: Literal["simulation", "opendp"] = Field(
        "simulation", description="simulation: seeded keyed noise for studies (not for publication); opendp: OpenDP's "
                "samplers, for a release you publish")
    invariants: list[Literal["unit_total", "occupied_blocks", "root_total"]] = Field(
        default_factory=list, description="facts the agency publishes exactly and declares as such (recorded in the "
        "ledger): unit_total = each unit's person count; occupied_blocks = a block list taken from the persons, for "
        "data that has no public one; root_total = the TopDown root's total (a state total in 2020)")
    audit: AuditConfig = AuditConfig()
    tolerance: ToleranceConfig = Field(ToleranceConfig(), description="what the board accepts: extra persons "
                                       "reconstructed beyond the best guess, and the inference attacks' gains over "
                                       "their own best guesses; safe means shown below each")
    inference: InferenceConfig = Field(InferenceConfig(), description="the membership and attribute inference attacks "
                                       "run on every release")
    files: list[ReleaseFileConfig] = Field(default_factory=list, description="releases made outside censusrecon "
                                           "(an agency's own tables or microdata), evaluated beside the mechanisms")
    programs: list[ReleaseProgramConfig] = Field(
        default_factory=list, description="release programs made outside censusrecon (OpenDP, Tumult Analytics, your "
        "own), run at each ε, attacked and audited as black boxes beside the mechanisms")
    risks: bool = Field(True, description="measure singling-out, linkability and attribute-inference risk of every "
                                          "microdata file a release publishes, with anonymeter (make risk-env)")
    risk_attacks: int = Field(500, ge=10, description="attacks per anonymeter evaluator (anonymeter's default, 500), "
                              "capped by the smallest of the published, private and control files; fewer attacks: "
                              "wider intervals")

    @model_validator(mode="after")
    def _check(self):
        if not self.epsilons or any(not (e >= MIN_EPSILON) or e == float("inf") for e in self.epsilons):
            raise ValueError(f"release.epsilons must be finite numbers >= {MIN_EPSILON:g}, got {self.epsilons}")
        unknown = [m for m in self.mechanisms if not registry.is_mechanism(m)]
        if unknown:
            raise ValueError(f"release.mechanisms: no mechanism is named {', '.join(map(repr, unknown))}; the "
                             f"registered ones: {', '.join(registry.names())}")
        for m in self.mechanisms:
            kind = registry.mechanism(m)
            if self.relation not in kind.relations:
                raise ValueError(f"{kind.title.lower()} is DP only under {' or '.join(kind.relations)} neighbours"
                                 + (" (n public)" if kind.relations == ("replace_one",) else ""))
            where = f"release.{kind.settings_field or 'settings.' + m}"
            if not self.settings_of(m):
                raise ValueError(f"{where}: give {kind.title.lower()}'s {kind.settings_word}")
            if kind.percent and any(not 0 < v <= 1 for v in self.settings_of(m)):
                raise ValueError(f"{where} must be shares in (0, 1], got {self.settings_of(m)}")
        if len(set(self.mechanisms)) != len(self.mechanisms) or not (self.mechanisms or self.files or self.programs):
            raise ValueError(f"release.mechanisms must be distinct, and non-empty unless release.files or "
                             f"release.programs names a release, got {self.mechanisms}")
        names = [p.name for p in self.programs]
        if len(set(names)) != len(names):
            raise ValueError(f"release.programs: names must be distinct, got {names}")
        named: dict[str, list] = {}
        for f in self.files:
            named.setdefault(f.name, []).append(f.epsilon)
        for name, eps in named.items():
            if len(eps) > 1 and (None in eps or len(set(eps)) != len(eps)):
                raise ValueError(f"release.files: the {len(eps)} files named {name!r} are one release at several ε: "
                                 f"each needs its own epsilon, got {eps}")
        if isinstance(self.audit.epsilons, list):
            stray = [e for e in self.audit.epsilons if e not in self.epsilons]
            if not self.audit.epsilons or stray:
                raise ValueError(f"release.audit.epsilons: {', '.join(f'{e:g}' for e in stray) or 'an empty list'} "
                                 f"{'is' if len(stray) == 1 else 'are'} not among release.epsilons "
                                 f"({', '.join(f'{e:g}' for e in self.epsilons)}): audit the ε you release at, or "
                                 "all (the default) or extremes")
        lawless = [p.name for p in self.programs if p.noise is None]
        if self.tolerance.informed_membership is not None and lawless:
            raise ValueError(f"release.tolerance.informed_membership asks the informed membership attack of program "
                             f"{lawless[0]!r}, which declares no noise law: declare release.programs[].noise (laplace "
                             "or gaussian), or leave the informed tolerance unset")
        totals = [i for i in self.invariants if i in ("unit_total", "root_total")]
        if totals and self.relation == "add_remove":
            raise ValueError(
                f"release.invariants {totals} publish an exact person count, and adding or removing one person changes "
                "it (ε = ∞ under add_remove). An exact total restricts the neighbours to those of the same size: "
                "declare release.relation: replace_one, or drop the invariant")
        return self

    def settings_of(self, mechanism: str) -> list[float]:
        """The settings a release is evaluated at: its mechanism's own (ε, swap rates, ptable variances: the
        field the registry names), the declared ε of a file release (``file:<name>``; 0 for one not declared
        DP), ε for a program."""
        if registry.is_file(mechanism):
            return [f.epsilon or 0.0 for f in self.files if FILE_PREFIX + f.name == mechanism]
        if registry.is_program(mechanism):
            return list(self.epsilons)
        field = registry.mechanism(mechanism).settings_field
        if field is None:
            return list(self.settings.get(mechanism, []))
        value = self
        for part in field.split("."):
            value = getattr(value, part)
        return list(value)

    def options_of(self, mechanism: str):
        """A mechanism's own section of this config (swapping's match list, the cell key method's ptable)."""
        field = registry.mechanism(mechanism).options_field
        return self.options.get(mechanism, {}) if field is None else getattr(self, field)

    @property
    def evaluated(self) -> list[str]:
        """Every release evaluated: the mechanisms, each program as program:<name>, each file as file:<name>."""
        return (list(self.mechanisms) + [PROGRAM_PREFIX + p.name for p in self.programs]
                + list(dict.fromkeys(FILE_PREFIX + f.name for f in self.files)))

    def program(self, mechanism: str) -> "ReleaseProgramConfig":
        return next(p for p in self.programs if PROGRAM_PREFIX + p.name == mechanism)

    def file(self, mechanism: str, setting: float) -> "ReleaseFileConfig":
        return next(f for f in self.files if FILE_PREFIX + f.name == mechanism and (f.epsilon or 0.0) == setting)

    @property
    def row_mechanisms(self) -> list[str]:
        """The releases evaluated that publish rows: mechanisms that do, and microdata files."""
        return ([m for m in self.mechanisms if registry.mechanism(m).rows]
                + list(dict.fromkeys(FILE_PREFIX + f.name for f in self.files if f.kind == "microdata")))

    @property
    def dp_mechanisms(self) -> list[str]:
        """The mechanisms censusrecon runs and audits as DP (files are not run, so not audited)."""
        return [m for m in self.mechanisms if registry.mechanism(m).dp]

    def audited_epsilons(self) -> list[float]:
        """The ε the audit checks (``audit.epsilons``), in increasing order; PUBLISH names no other."""
        eps = sorted(set(self.epsilons))
        if isinstance(self.audit.epsilons, list):
            return sorted(set(self.audit.epsilons))
        return eps if self.audit.epsilons == "all" else sorted({eps[0], eps[-1]})
