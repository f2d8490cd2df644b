"""The exact attack in a run: its ranked rows, its certificates checked against D, the Bureau's
agreement measure and its reidentification simulation (this layer sees both truth and attack)."""

from __future__ import annotations

import logging
import time

import numpy as np
import pandas as pd

from censusrecon.experiments.metrics import match_rate_curve
from censusrecon.microdata.agreement import agreement_by_size
from censusrecon.microdata.census import AGE_BIN38_OF_AGE as AGE_GROUP
from censusrecon.microdata.census import P12_GROUP_OF_AGE
from censusrecon.microdata.describe import SIZE_BINS, SIZE_LABELS, block_groups
from censusrecon.microdata.dataset import Dataset
from censusrecon.microdata.domain import Domain
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.ranking import Ranking, rank_by_score
from censusrecon.reconstruct.exact import ExactResult, certify_rows, reconstruct_exact
from censusrecon.experiments.config import ReidentificationConfig
from censusrecon.microdata.seeds import stable_seed
from censusrecon.experiments.reid import (block_modes, commercial_file, guesser_files, perfect_file, reidentify,
                                         vulnerable_persons)
from censusrecon.reconstruct.linkage import AttackerFile
from censusrecon.synth.swapping import swap_records

log = logging.getLogger(__name__)

#: The blocks' solution variability measured on each key, as :func:`reconstruct.exact.reconstruct_exact`
#: stores it: the Bureau's text's 38 age bins ("solvar"), its released code's P12 groups ("solvar_p12").
SOLVAR_KEYS = ("solvar", "solvar_p12")


def check_certified_counts(res: ExactResult, truth: np.ndarray, unit: str) -> None:
    """Every consistent dataset holds each certified row at least its certified count times, and D
    is one: a certified count above D's count of that row is impossible, so the run stops (the
    model or the solver is wrong). Checks counts, not only presence."""
    if res.certified is None:
        return
    keys, counts = res.certified_rows()
    have = _multiset(truth)
    over = [(k, int(c), have.get(k, 0)) for k, c in zip(keys.tolist(), counts.tolist()) if have.get(k, 0) < c]
    if over:
        k, c, h = over[0]
        raise CensusReconError(f"unit {unit}: row {k} is certified {c} times but D holds it {h} times, which the "
                               f"certificate makes impossible ({len(over)} such rows): the model or the solver is "
                               "wrong; stopping")


def exact_rankings(res: ExactResult) -> tuple[Ranking, Ranking]:
    """``exact``: the solution's rows, certified rows first (by certified count), then the rest (by
    solved count); ``exact_certified``: the certified rows only."""
    keys, counts = res.rows()
    cert_keys, cert_counts = res.certified_rows() if res.certified is not None else (np.zeros(0, np.int64),
                                                                                      np.zeros(0, np.int64))
    level = np.zeros(len(keys))
    pos = np.searchsorted(keys, cert_keys)
    level[pos] = cert_counts
    big = float(counts.sum() + 1)
    score = np.where(level > 0, big + level, counts.astype(np.float64))
    certified = rank_by_score(cert_keys, cert_counts.astype(np.float64))
    return rank_by_score(keys, score), certified


def _multiset(keys: np.ndarray, counts: np.ndarray | None = None) -> dict:
    keys = np.asarray(keys)
    counts = np.ones(len(keys), np.int64) if counts is None else np.asarray(counts)
    out: dict = {}
    for k, c in zip(keys.tolist(), counts.tolist()):
        out[k] = out.get(k, 0) + int(c)
    return out


def agreement(domain: Domain, truth_keys: np.ndarray, rec_keys: np.ndarray, rec_counts: np.ndarray | None = None
              ) -> dict | None:
    """The Bureau's agreement measure: reconstructed persons matched one-to-one to D's within each
    block, first on every attribute with exact age, then the leftovers with age replaced by its
    age bin (the Bureau's 38 bins: single years to 21, then P12's groups), over all blocks
    (:func:`microdata.agreement.agreement_by_size`). Returns the shares of D's persons matched (exact
    age; exact or binned age), or None when the domain has no single-year AGE."""
    if "AGE" not in domain or domain.size("AGE") != len(AGE_GROUP):
        return None
    rec = np.asarray(rec_keys, dtype=np.int64)
    if rec_counts is not None:
        rec = np.repeat(rec, np.asarray(rec_counts, dtype=np.int64))
    t, r = domain.decode(np.asarray(truth_keys, dtype=np.int64)), domain.decode(rec)
    if "BLOCK" in domain:
        block = domain.index("BLOCK")
    else:  # one block: the whole unit
        t, r, block = np.column_stack([t, np.zeros(len(t), np.int64)]), np.column_stack(
            [r, np.zeros(len(r), np.int64)]), t.shape[1]
    total = agreement_by_size(t, r, block, domain.index("AGE"), AGE_GROUP)[-1]
    n = max(len(truth_keys), 1)
    return {"agree_exact_age": total["agree_exact"] / n, "agree_binned_age": total["agree_binned"] / n}


def by_block_size(domain: Domain, truth_keys: np.ndarray, rec_keys: np.ndarray, blocks: dict) -> list[dict]:
    """Per Bureau block-size bin (a block's size: its persons in D, the tabulated population), the
    solved blocks, those with zero solution variability on all the tables and their persons, the
    Bureau's solution variability where measured (blocks and persons with solvar 0, and the records
    that can differ at most: Σ N_b solvar_b / 100), on its text's 38 age bins and on its released
    code's key, P12's 23 age groups (``_p12``), and the persons of D the reconstruction agrees
    with on exact age and on exact or 38-bin age (:func:`agreement`, counts)."""
    if "BLOCK" not in domain:
        return []
    jb = domain.index("BLOCK")
    t_block = domain.decode(np.asarray(truth_keys))[:, jb]
    r_block = domain.decode(np.asarray(rec_keys))[:, jb] if len(rec_keys) else np.zeros(0, np.int64)
    ids, sizes = np.unique(t_block, return_counts=True)
    size_of = dict(zip(ids.tolist(), sizes.tolist()))
    out = []
    for (lo, hi), label in zip(SIZE_BINS, SIZE_LABELS):
        sel = [b for b, n in size_of.items() if n >= lo and (hi is None or n <= hi)]
        if not sel:
            continue
        zero = [b for b in sel if blocks.get(b, {}).get("zero_variability") is True]
        undecided = [b for b in sel if b in blocks and blocks[b].get("zero_variability") is None]
        t_in, r_in = np.isin(t_block, sel), np.isin(r_block, sel)
        a = agreement(domain, np.asarray(truth_keys)[t_in], np.asarray(rec_keys)[r_in]) or {}
        persons = int(t_in.sum())
        row = {"size": label, "blocks": len(sel), "blocks_zero_variability": len(zero),
               "blocks_undecided": len(undecided),
               "persons": persons, "persons_zero_variability": int(sum(size_of[b] for b in zero))}
        for key in SOLVAR_KEYS:
            solvar = {b: blocks[b][key] for b in sel if blocks.get(b, {}).get(key) is not None}
            row.update({f"blocks_{key}": len(solvar), f"blocks_{key}_zero": sum(v == 0 for v in solvar.values()),
                        f"persons_{key}": int(sum(size_of[b] for b in solvar)),
                        f"persons_{key}_zero": int(sum(size_of[b] for b, v in solvar.items() if v == 0)),
                        # Σ N_b solvar_b / 100: records that can differ, at most (the numerator of cumsolvar)
                        f"{key}_records": float(sum(size_of[b] * v / 100 for b, v in solvar.items()))})
        out.append(dict(row, agree_exact_age_persons=int(round(a.get("agree_exact_age", 0.0) * persons)),
                        agree_binned_age_persons=int(round(a.get("agree_binned_age", 0.0) * persons))))
    return out


def _race_eth(domain: Domain, codes: np.ndarray) -> np.ndarray:
    """One code per row for its race (the detailed CENRACE where there is one) and ethnicity."""
    race = "CENRACE" if "CENRACE" in domain else ("RACE" if "RACE" in domain else None)
    cols = [domain.index(a) for a in (race, "HISP") if a is not None and a in domain]
    if not cols:
        return np.zeros(len(codes), np.int64)
    return np.ravel_multi_index(tuple(codes[:, c] for c in cols), tuple(domain.sizes[c] for c in cols))


def reidentification(D: Dataset, methods: dict[str, np.ndarray], rng: np.random.Generator, rc=None, *,
                     zero_variability_blocks: set | None = None, tabulated: np.ndarray | None = None,
                     group_of_block: np.ndarray | None = None) -> pd.DataFrame | None:
    """The Bureau's reidentification simulation on one unit (:mod:`experiments.reid`): the perfect
    and the commercial-like attacker files linked one to one to each method's reconstructed persons
    (``methods[name]``: rows of codes) and to the modal and proportional guessers' files; putative,
    confirmed and precision, overall and for the vulnerable group (non-modal, unique on {block,
    sex, 38-bin age}, in a zero-variability block when ``zero_variability_blocks`` is given). ``rc``
    is the config's ``reidentification`` section (its defaults when None); ``tabulated``: the rows the
    tables were computed from when they are not D's (a swapped file, the Bureau's HDF), from which the
    guessers take their block shares; ``group_of_block``: each BLOCK code's block group, where the
    modal rule falls back to (the whole unit without it). None without single-year AGE and SEX."""
    domain, truth = D.domain, D.codes
    if not {"AGE", "SEX"} <= set(domain.names) or domain.size("AGE") != len(AGE_GROUP):
        return None
    rc = rc or ReidentificationConfig()
    file_rng, guess_rng = (np.random.default_rng(int(x)) for x in rng.integers(0, 2**62, 2))  # independent streams
    link_seed = int(rng.integers(0, 2**62))
    jb = domain.index("BLOCK") if "BLOCK" in domain else None
    ja, js = domain.index("AGE"), domain.index("SEX")
    block = truth[:, jb] if jb is not None else np.zeros(len(truth), np.int64)
    sex, age, re = truth[:, js], truth[:, ja], _race_eth(domain, truth)
    files: list[AttackerFile] = []
    if "perfect" in rc.attacker_files:
        files.append(perfect_file(block, sex, age))
    if "commercial" in rc.attacker_files:
        files.append(commercial_file(perfect_file(block, sex, age), np.unique(block), file_rng, rc.commercial,
                                     n_sexes=domain.size("SEX"), n_ages=domain.size("AGE")))
    recs = {}
    for name, rec in methods.items():
        rb = rec[:, jb] if jb is not None else np.zeros(len(rec), np.int64)
        recs[name] = (rb, rec[:, js], rec[:, ja], _race_eth(domain, rec))
    mode = block_modes(block, re, group_of_block)  # once, for the vulnerable group (and the guessers, on D's own tables)
    seen = (block, sex, age, re)  # what the guessers read: the published tables, D's or the swapped file's
    if tabulated is not None:
        seen = (tabulated[:, jb] if jb is not None else np.zeros(len(tabulated), np.int64), tabulated[:, js],
                tabulated[:, ja], _race_eth(domain, tabulated))
    for name, guess in guesser_files(*seen, guess_rng, mode if tabulated is None else None, group_of_block).items():
        recs[name] = (*seen[:3], guess)
    vulnerable = vulnerable_persons(block, sex, age, re, zero_variability_blocks, mode)
    return reidentify(files, recs, (block, sex, age, re), vulnerable, link_seed)


def evaluate_exact(cfg, work, workload, rankings: dict, baseline_rankings: dict, rng: np.random.Generator,
                   label: str) -> tuple[list, dict, list, list]:
    """The exact attack on one unit's published tables (``workload``, named ``label``): its curves (``exact``,
    ``exact_certified``), its facts (solve, certificates, blocks, RAP-Rank's rows certified), agreement rows, reid
    rows. ``work``: the unit's problem (``prob``), its rows' keys (``truth``), u and the k grid, the persons outside
    the unit and its blocks' size classes (:class:`experiments.runner.UnitWork`); ``rankings``: RAP-Rank's, whose
    rows are certified; ``baseline_rankings``: the best guess's, whose agreement is measured too. A certified row
    that is not in D is impossible; the run stops if one appears."""
    prob, truth, ks, u, outside, block_class = work.prob, work.truth, work.ks, work.u, work.outside, work.block_class
    D = prob.private
    t0 = time.perf_counter()
    res, solver, hdf, swap_facts = _solve(cfg, prob, workload)
    facts = {"workload": label, **res.facts()}
    if swap_facts is not None:
        facts["tables_from"] = {"swapped_file": True, **swap_facts}
    if not res.solved:
        log.warning("unit %s: exact reconstruction %s", prob.unit, res.status)
        return [], facts, [], []
    exact_r, cert_r = exact_rankings(res)
    hdf_keys = truth if swap_facts is None else hdf.keys()
    check_certified_counts(res, hdf_keys, prob.unit)  # certified rows are in the file the tables count
    names = ("exact", "exact_certified") if len(cfg.queries) == 1 else (f"exact_{label}", f"exact_certified_{label}")
    curves = [match_rate_curve(exact_r, truth, ks, u, len(exact_r), outside, block_class).assign(method=names[0]),
              match_rate_curve(cert_r, truth, ks, u, len(cert_r), outside, block_class).assign(method=names[1])]
    if rankings:  # Generate-then-Verify on RAP-Rank's own rows
        facts["rap_rank_certified"] = _rap_rows_certified(rankings, res, solver, cert_r, u, np.unique(truth))
    facts["seconds_total"] = round(time.perf_counter() - t0, 3)
    # the Bureau's agreement, and reidentification
    recon = {names[0]: np.repeat(*res.rows())}
    zv_blocks = res.blocks_coarse or res.blocks  # zero variability on the 38 bins where measured
    if zv_blocks:  # agreement against the file the tables count (the Bureau's: the rHDF against the HDF)
        facts["by_block_size"] = by_block_size(D.domain, hdf_keys, recon[names[0]], zv_blocks)
        facts["zero_variability_schema"] = "38-bin age" if res.blocks_coarse else "single-year age"
        solvar = sorted(round(f["solvar"], 4) for f in zv_blocks.values() if f.get("solvar") is not None)
        if solvar:  # every block's, for the solvar percentiles of HDSR Table 2 (pooled over units)
            facts["solvar_by_block"] = solvar
    for name, r in {**rankings, **baseline_rankings}.items():
        recon[name] = r.keys[:len(D)]
    agree = _agreement_rows(D, truth, recon, None if swap_facts is None else (names[0], hdf_keys))
    reid = []
    if getattr(cfg, "reidentification", None) is not None:
        methods = {k: D.domain.decode(v) for k, v in recon.items() if k in (names[0], *rankings)}
        if swap_facts is not None:  # the swapped file itself as the attacker's reconstruction (HDSR's HDF row)
            methods["hdf"] = hdf.codes
        reid, zero_rule = _reid_rows(cfg, prob, methods, zv_blocks, None if swap_facts is None else hdf.codes, rng)
        if zero_rule is not None:
            facts["vulnerable_zero_blocks"] = zero_rule
    return curves, facts, agree, reid


def _solve(cfg, prob, workload) -> tuple:
    """The exact attack's solve of the unit's tables, tabulated from D or, with ``attack.exact_swap_rate``, from D
    swapped (the Bureau's HDF): the result, its solver (for certificates), the file tabulated and the swap's facts."""
    D = prob.private
    coarsen, keys = None, None
    if "AGE" in D.domain and D.domain.size("AGE") == len(AGE_GROUP):  # the Bureau's schema: 38 age bins (its
        coarsen = {"AGE": AGE_GROUP}  # text); its released code keys solvar on P12's 23 groups (imprecise ages)
        keys = {"p12": {"AGE": P12_GROUP_OF_AGE}}
    hdf, swap_facts = D, None  # the file the tables are tabulated from: D, or D swapped (the Bureau's HDF)
    if cfg.attack.exact_swap_rate > 0 and "BLOCK" in D.domain:  # (without BLOCK there is nothing to swap between)
        hdf, swap_facts = swap_records(D, cfg.attack.exact_swap_rate,
                                       np.random.default_rng(stable_seed("hdf", cfg.seed, prob.unit, prob.with_block)),
                                       ["SEX", "AGE"])
    res, solver = reconstruct_exact(workload, workload.counts(hdf), time_limit=cfg.attack.exact_time_limit,
                                    coarsen=coarsen, solvar_keys=keys)
    return res, solver, hdf, swap_facts


def _rap_rows_certified(rankings: dict, res, solver, cert_r, u: int, truth_set: np.ndarray) -> dict:
    """Generate-then-Verify: each RAP-Rank ranking's top u rows certified against the count model, with how many of
    them are in D and how many certified rows it ranked below u."""
    out = {}
    for name, r in rankings.items():
        top = r.keys[:u]
        if solver is not None:
            cert = certify_rows(solver, res.model, top)
            proven, complete, undecided = cert.proven, cert.complete, cert.undecided
        else:
            proven, complete, undecided = np.zeros(len(top), bool), False, len(top)
        ranked = {k: i for i, k in enumerate(r.keys.tolist())}
        low = sum(1 for k in cert_r.keys.tolist() if ranked.get(k, 10**9) >= u)
        out[name] = {
            "top_u": int(len(top)), "top_u_certified": int(proven.sum()),
            "top_u_certification_complete": bool(complete), "top_u_undecided": int(undecided),
            "top_u_certified_in_d": int(np.isin(top[proven], truth_set).sum()),
            "certified_rows_ranked_below_u": int(low), "certified_rows": int(len(cert_r))}
    return out


def _agreement_rows(D, truth: np.ndarray, recon: dict, swapped: tuple | None) -> list[dict]:
    """The Bureau's agreement of each reconstruction with D (the CEF); with a swapped file (``swapped``: the exact
    attack's name and the file's keys), the file's own agreement with D and the reconstruction's with the file."""
    agree = []
    for name, keys in recon.items():  # against D (the CEF)
        a = agreement(D.domain, truth, keys)
        if a is not None:
            agree.append({"method": name, **a})
    if swapped is not None:
        exact_name, hdf_keys = swapped
        for name, ref, keys in (("hdf", truth, hdf_keys), (f"{exact_name}_vs_hdf", hdf_keys, recon[exact_name])):
            a = agreement(D.domain, ref, keys)
            if a is not None:
                agree.append({"method": name, **a})
    return agree


def _reid_rows(cfg, prob, methods: dict, zv_blocks: dict, hdf_codes, rng: np.random.Generator
               ) -> tuple[list[dict], str | None]:
    """The Bureau's reidentification simulation against each reconstruction (``methods``: name → decoded rows), and
    the rule that chose the vulnerable group's blocks among the solve's (``zv_blocks``): those of zero solution
    variability (None: no block measured); the modal rule's block groups from the blocks' GEOIDs."""
    D = prob.private
    zero, rule = None, None
    if zv_blocks and all(f.get("solvar") is not None for f in zv_blocks.values()):
        zero = {b for b, f in zv_blocks.items() if f["solvar"] == 0}  # the Bureau's: solvar 0
        rule = "solvar 0 (the Bureau's block relaxation)"
    elif zv_blocks:
        zero = {b for b, f in zv_blocks.items() if f["zero_variability"] is True}
        rule = "zero variability on all the tables"
    # the Bureau's modal rule falls back to the block group (block GEOIDs' first 12 characters)
    groups = block_groups(np.asarray(prob.blocks)) if prob.blocks and "BLOCK" in D.domain else None
    group_of_block = None if groups is None else np.unique(groups, return_inverse=True)[1]
    if group_of_block is not None and D.domain.size("BLOCK") > len(group_of_block):  # padded BLOCK codes
        group_of_block = np.concatenate([group_of_block, np.zeros(D.domain.size("BLOCK") - len(group_of_block),
                                                                  np.int64)])
    df = reidentification(D, methods, rng, cfg.reidentification, zero_variability_blocks=zero, tabulated=hdf_codes,
                          group_of_block=group_of_block)
    return ([] if df is None else df.to_dict("records")), rule
