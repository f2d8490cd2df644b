import numpy as np
import pandas as pd
import pytest

from censusrecon.experiments.metrics import (average_curves, band_kind, block_classes, calibration, effective_u, k_grid,
                                 lift_by_baseline, match_rate_curve, persons_by_block_size, persons_reconstructed,
                                 summarise_persons)
from censusrecon.microdata.errors import CensusReconError
from censusrecon.microdata.ranking import Ranking, rank_by_frequency


def test_hand_computed_match_rate_is_over_k_and_a_short_list_stops_matching():
    # R = (10, 20, 30, 40, 50); D holds 10, 30, 50, 60 (60 never guessed)
    r = Ranking(np.array([10, 20, 30, 40, 50]), np.array([5.0, 4, 3, 2, 1]))
    c = match_rate_curve(r, np.array([10, 30, 50, 60, 30]), np.array([1, 2, 3, 4, 5, 8]), u=4)
    assert c.num_matched.tolist() == [1, 1, 2, 2, 3, 3]
    assert c.num_candidates.tolist() == [1, 2, 3, 4, 5, 5]  # only 5 candidates exist
    np.testing.assert_allclose(c.match_rate, [1, 1 / 2, 2 / 3, 2 / 4, 3 / 5, 3 / 8])  # over k, not over 5
    np.testing.assert_allclose(c.k_over_u, [0.25, 0.5, 0.75, 1.0, 1.25, 2.0])
    assert c.union_size.tolist() == [5] * 6
    assert list(c.columns[:7]) == ["threshold", "k", "k_over_u", "num_candidates", "num_matched", "match_rate",
                                   "union_size"]
    # a list cut to its top 3 of a union of 9: judged on what it offers, union recorded
    cut = match_rate_curve(Ranking(r.keys[:3], r.scores[:3]), np.array([10, 30]), np.array([2, 4]), u=2, union_size=9)
    assert cut.num_candidates.tolist() == [2, 3] and cut.match_rate.tolist() == [0.5, 0.5]
    assert (cut.num_candidates <= np.minimum(cut.k, cut.union_size)).all() and cut.union_size.tolist() == [9, 9]
    with pytest.raises(CensusReconError, match="union_size"):
        match_rate_curve(r, np.array([10]), np.array([1]), u=1, union_size=2)


def test_the_issue_example_a_short_list_is_not_held_flat_to_k_over_u_1():
    # 285 candidates, u = 420, 55 matched among them: over min(k, |R|) that reads 0.193, over k 0.131
    keys = np.arange(285)
    r = Ranking(keys, np.linspace(285, 1, 285))
    c = match_rate_curve(r, keys[:55], np.array([420]), u=420)
    assert c.match_rate.round(3).tolist() == [0.131] and c.num_candidates.tolist() == [285]


def test_matches_split_by_how_often_the_row_occurs_outside_the_unit():
    r = Ranking(np.array([1, 2, 3, 4, 5, 6]), np.arange(6, 0, -1.0))
    truth = np.array([1, 2, 3, 4, 5, 5])  # 6 is not in D
    outside = (np.array([1, 2, 3, 4, 5]), np.array([0, 2, 3, 10, 0]))
    c = match_rate_curve(r, truth, np.array([2, 6]), u=5, outside=outside)
    assert c.num_matched_outside_0.tolist() == [1, 2]  # rows 1 and 5
    assert c.num_matched_outside_1_2.tolist() == [1, 1]  # row 2
    assert c.num_matched_outside_3_9.tolist() == [0, 1]  # row 3
    assert c.num_matched_outside_10_plus.tolist() == [0, 1]  # row 4
    assert c.num_matched_unique.tolist() == [2, 4] and c.num_matched_common.tolist() == [0, 1]  # 5 occurs twice
    with pytest.raises(CensusReconError, match="cover every distinct row"):
        match_rate_curve(r, truth, np.array([6]), u=5, outside=(np.array([1, 2]), np.array([0, 0])))


def test_unique_matches_split_by_the_size_of_their_block():
    """D: block 0 has 12 persons (rows 100..111, size class 10-49), block 1 has 2 persons with the same row 200
    (not unique) and block 2 one person (row 300): classes 10-49 and 1-9. The ranking offers 300, 100, 200, 999,
    101: at k = 5 it matches unique rows 300 (1-9), 100 and 101 (10-49); 200 is matched but not unique."""
    truth = np.array([*range(100, 112), 200, 200, 300])
    blocks = np.array([0] * 12 + [1, 1, 2])
    classes = block_classes(truth, blocks)
    assert dict(zip(classes[0].tolist(), classes[1].tolist()))[100] == 1 and classes[1][-1] == 0
    r = Ranking(np.array([300, 100, 200, 999, 101]), np.arange(5, 0, -1.0))
    c = match_rate_curve(r, truth, np.array([1, 5]), u=14, block_class=classes)
    assert c["num_matched_unique_block_1-9"].tolist() == [1, 1]
    assert c["num_matched_unique_block_10-49"].tolist() == [0, 2]
    assert c["num_matched_unique_block_100+"].tolist() == [0, 0]
    assert c["unique_in_D_block_1-9"].tolist() == [1, 1] and c["unique_in_D_block_10-49"].tolist() == [12, 12]
    assert c.num_matched.tolist() == [1, 4] and c.num_matched_unique.tolist() == [1, 3]


def test_persons_by_block_size_against_the_best_baseline_with_an_interval():
    """Two units, each with blocks of 1-9 (10 unique persons) and one with a block of 100+ (50): the attack finds
    6 and 8 in 1-9 against baselines' best 1 and 1 (differences 5 and 7: mean 6, sd sqrt(2), t(1) interval
    6 ± 12.706); in 100+ only unit b has blocks: 30 against 5, one unit, no interval."""
    def curve(unit, method, small, large, large_total):
        return {"variant": True, "unit": unit, "method": method, "k": 20, "u": 20, "num_matched_unique": small + large,
                "num_matched_unique_block_1-9": small, "num_matched_unique_block_10-49": 0,
                "num_matched_unique_block_50-99": 0, "num_matched_unique_block_100+": large,
                "unique_in_D_block_1-9": 10, "unique_in_D_block_10-49": 0, "unique_in_D_block_50-99": 0,
                "unique_in_D_block_100+": large_total}
    df = pd.DataFrame([curve("a", "rap_rank", 6, 0, 0), curve("a", "national", 1, 0, 0), curve("a", "chance", 0, 0, 0),
                       curve("b", "rap_rank", 8, 30, 50), curve("b", "national", 1, 5, 50)])
    t = persons_by_block_size(df).set_index("block_size")
    assert t.loc["1-9", "units"] == 2 and t.loc["1-9", "persons_reconstructed"] == 14
    assert t.loc["1-9", "baseline_persons"] == 2 and t.loc["1-9", "unique_in_D"] == 20
    assert t.loc["1-9", "difference_mean"] == 6.0
    assert t.loc["1-9", "ci_high"] == pytest.approx(6 + 12.7062 * 1.0, abs=1e-3)  # sd √2 over √2 units: s.e. 1
    assert t.loc["100+", "units"] == 1 and t.loc["100+", "difference_mean"] == 25 and t.loc["100+", "ci_low"] == -np.inf
    assert t.loc["10-49", "units"] == 0 and np.isnan(t.loc["10-49", "difference_mean"])


def test_calibration_bins_the_whole_union_by_run_fraction():
    keys = np.arange(10)
    frac = np.array([0.1, 0.1, 0.2, 0.3, 0.5, 0.5, 0.9, 1.0, 1.0, 1.0])
    t = calibration(keys, frac, np.array([5, 6, 7, 8, 9, 0]), runs=10, bins=5)
    assert t.num_candidates.sum() == 10 and len(t) == 5
    assert t.num_candidates.tolist() == [3, 1, 2, 0, 4]  # (0, .2], (.2, .4], (.4, .6], (.6, .8], (.8, 1]
    assert t.num_matched.tolist() == [1, 0, 1, 0, 4]
    assert np.isnan(t.match_rate[3]) and t.match_rate[4] == 1.0
    assert len(calibration(keys, frac, keys, runs=3)) == 3  # never more bins than K allows
    with pytest.raises(CensusReconError, match="run fractions"):
        calibration(keys, frac * 2, keys, runs=10)


def _frame(rows):
    return pd.DataFrame(rows, columns=["variant", "unit", "method", "k", "u", "n_rows", "match_rate", "num_matched",
                                       "num_matched_unique"])


def test_persons_reconstructed_against_the_best_baseline_of_each_unit():
    rows = [  # at k = u: unit a (u = 4), unit b (u = 3); only the k = u rows count
        (True, "a", "rap_rank", 4, 4, 6, 0.75, 3, 3), (True, "a", "rap_rank", 2, 4, 6, 1.0, 2, 2),
        (True, "a", "holdout", 4, 4, 6, 0.5, 2, 1), (True, "a", "county", 4, 4, 6, 0.5, 2, 2),
        (True, "b", "rap_rank", 3, 3, 5, 1.0, 3, 1), (True, "b", "holdout", 3, 3, 5, 0.3, 1, 0),
        (True, "b", "county", 3, 3, 5, 0.3, 1, 0),
    ]
    p = persons_reconstructed(_frame(rows))
    assert p.set_index("unit")["persons_reconstructed"].to_dict() == {"a": 3, "b": 1}
    assert p.set_index("unit")["best_baseline"].to_dict() == {"a": "county", "b": "county"}  # ties by name
    assert p.set_index("unit")["difference"].to_dict() == {"a": 1, "b": 1}
    s = summarise_persons(p)
    assert s.persons.tolist() == [4] and s.baseline_persons.tolist() == [2] and s.difference_sem.tolist() == [0.0]


def test_units_of_different_sizes_are_also_compared_as_shares_of_their_unique_persons():
    """Differences 10, 22, 27 on units of 100, 200, 300 persons unique in D: shares 0.1, 0.11, 0.09,
    mean 0.1, sd 0.01, interval 0.1 ± t(0.975, 2)·0.01/√3 = 0.0752 to 0.1248, beyond 0, where the
    persons themselves (mean 19.667, sd 8.737) give −2.0 to 41.4; the persons' interval is unchanged."""
    def per_unit(sizes):
        return pd.DataFrame({"variant": False, "method": "rap_rank", "unit": ["a", "b", "c"], "u": 5, "n_rows": 900,
                             "n_unique": sizes, "persons_reconstructed": [30, 40, 50],
                             "baseline_persons": [20, 18, 23], "difference": [10, 22, 27]})

    s = summarise_persons(per_unit([100, 200, 300])).iloc[0]
    half = 4.302653 * 0.01 / 3 ** 0.5
    assert s.share_mean == pytest.approx(0.1) and s.unique_in_d == 600
    assert s.share_low == pytest.approx(0.1 - half, abs=1e-6) and s.share_high == pytest.approx(0.1 + half, abs=1e-6)
    assert s.difference_sem == pytest.approx(8.736895 / 3 ** 0.5, abs=1e-5) and not s.beyond_spread
    assert s.ci_low == pytest.approx(59 / 3 - 4.302653 * 8.736895 / 3 ** 0.5, abs=1e-4)
    no_size = summarise_persons(per_unit([100, 200, 300]).drop(columns="n_unique")).iloc[0]
    assert no_size.difference_sem == pytest.approx(s.difference_sem) and "share_mean" not in no_size


def test_lift_is_computed_per_variant_never_pooled():
    rows = []
    for v, rap, base in ((True, 0.9, 0.1), (False, 0.8, 0.6)):
        for k in (1, 2):
            rows.append((v, "t", "rap_rank", k, 2, 4, rap, 0, 0))
            rows.append((v, "t", "holdout", k, 2, 4, base, 0, 0))
    lift = lift_by_baseline(_frame(rows)).set_index("variant")["lift"]
    assert lift[True] == pytest.approx(0.8) and lift[False] == pytest.approx(0.2)


def test_bands_are_standard_errors_below_20_units_and_bootstrap_from_20():
    assert band_kind(4) == "sem" and band_kind(19) == "sem" and band_kind(20) == "bootstrap"
    rows = [dict(variant=False, method="m", unit=f"u{i}", u=1, k=1, match_rate=float(i % 2)) for i in range(4)]
    avg = average_curves(pd.DataFrame(rows), 1, by=["variant", "method"], bootstrap=200)
    assert avg.band.tolist() == ["sem"]
    assert avg.band_high[0] - avg.match_rate[0] == pytest.approx(avg["sem"][0])
    rows = [dict(variant=False, method="m", unit=f"u{i}", u=1, k=1, match_rate=float(i % 2)) for i in range(24)]
    avg = average_curves(pd.DataFrame(rows), 1, by=["variant", "method"], bootstrap=200)
    assert avg.band.tolist() == ["bootstrap"] and avg.band_low[0] == avg.ci_low[0]


def test_match_rate_bookkeeping_is_monotone():
    rng = np.random.default_rng(0)
    r = rank_by_frequency(rng.integers(0, 50, 400), rng=rng)
    c = match_rate_curve(r, rng.integers(0, 50, 30), np.arange(1, 60), u=30)
    assert (np.diff(c.num_matched) >= 0).all() and (np.diff(c.num_matched) <= 1).all()
    assert (np.diff(c.num_candidates) >= 0).all()
    assert (c.num_matched <= c.num_candidates).all()


def test_an_empty_ranking_matches_nothing():
    c = match_rate_curve(Ranking(np.zeros(0, np.int64), np.zeros(0)), np.array([1]), np.array([1, 3]), u=1)
    assert c.match_rate.tolist() == [0.0, 0.0] and c.num_candidates.tolist() == [0, 0] and c.union_size[0] == 0


def test_u_is_capped_at_the_holdouts_distinct_rows():
    assert effective_u(100, 80) == 80
    assert effective_u(50, 80) == 50
    with pytest.raises(CensusReconError):
        effective_u(0, 3)
    assert k_grid(10, 4).tolist() == [3, 5, 8, 10]
    assert k_grid(2, 10).tolist() == [1, 2]


def test_average_curves_reads_each_unit_on_a_common_k_over_u_axis():
    rows = []
    for unit, u, rates in (("a", 2, [1.0, 0.5]), ("b", 4, [1.0, 1.0, 0.0, 0.0])):
        for k, mr in enumerate(rates, start=1):
            rows.append(dict(variant=False, method="m", unit=unit, u=u, k=k, match_rate=mr))
    avg = average_curves(pd.DataFrame(rows), 2, by=["variant", "method"])
    # x=0.5: a at k=1 (1.0), b at k=2 (1.0); x=1: a at k=2 (.5), b at k=4 (0)
    assert avg.match_rate.tolist() == [1.0, 0.25]
    assert avg.units.tolist() == [2, 2]


def test_strength_reads_the_first_k_runs_as_the_attack_with_k_runs():
    from censusrecon.experiments.metrics import saturation, saturation_words, strength_by_runs, strength_prefixes

    assert strength_prefixes(100) == [12, 25, 50, 100] and strength_prefixes(24) == [3, 6, 12, 24]
    assert strength_prefixes(2) == [1, 2] and strength_prefixes(1) == [1]
    # one attribute, the key is the code; D holds 1, 2, 3 once and 9 twice (9 is matched, not unique)
    truth = np.array([1, 2, 3, 9, 9])
    codes = np.array([[[1], [7]], [[9], [9]], [[2], [1]], [[3], [2]]])  # K = 4 runs of 2 rows
    got = strength_by_runs(codes, lambda c: c[:, 0], truth, u=2)
    # K=1: {1, 7} -> top 2: 1 (unique) and 7 -> 1 person; K=2: 9 (x2) first, then 1 or 7 (tie, seeded)
    # K=4: 1 (x2), 2 (x2), 9 (x2) -> top 2 of these, all in D: 2 matched
    by = {r["runs"]: r for r in got}
    assert list(by) == [1, 2, 4] and by[1]["persons"] == 1 and by[1]["matched"] == 1
    assert by[2]["matched"] >= 1 and by[4]["matched"] == 2
    st = pd.DataFrame([{"method": "rap", "unit": u, "runs": k, "persons": p}
                       for u in ("a", "b") for k, p in ((3, 10), (6, 40), (12, 50), (24, 51))])
    row = saturation(st, ["method"]).iloc[0]
    assert row["persons"] == 102 and row["persons_half"] == 100 and row["gain"] == 2 and row["saturated"]
    assert "saturated" in saturation_words(row) and "NOT" not in saturation_words(row)
    st.loc[st["runs"] == 24, "persons"] = 60  # +20 on 100: more than 2% and more than one per unit
    row = saturation(st, ["method"]).iloc[0]
    assert not row["saturated"] and "NOT saturated" in saturation_words(row) and "+20" in saturation_words(row)


def test_the_strength_sentence_says_whether_more_runs_could_change_the_verdict():
    import pandas as pd

    from censusrecon.experiments.release.release_report import doublings_to_reach, strength_sentence

    assert doublings_to_reach(246, 6) == 41 and doublings_to_reach(10, 5) == 2 and doublings_to_reach(11, 5) == 3
    assert doublings_to_reach(0, 5) is None and doublings_to_reach(-3, 5) is None and doublings_to_reach(10, 0) is None

    def sentence(persons_by_k, guess):
        ks = sorted(persons_by_k)
        by_k = pd.DataFrame([{"mechanism": "laplace_tables", "setting": 8.0, "runs": ks[-1], "half": ks[-2],
                              "persons": persons_by_k[ks[-1]], "gain": persons_by_k[ks[-1]] - persons_by_k[ks[-2]],
                              "saturated": False, "by_runs": persons_by_k}])
        row = {"mechanism": "laplace_tables", "x": {"setting": 8.0, "baseline_persons": guess}}
        return strength_sentence({"by_k": by_k}, row)

    far = sentence({12: 222, 24: 228}, 474)  # 246 below the guess at +6 a doubling: 41 doublings
    assert "41 more doublings" in far and "unlikely to change" in far and "could change" not in far
    near = sentence({12: 460, 24: 470}, 474)  # 4 below at +10: one doubling could cross
    assert "could change with a stronger attack" in near and "doublings" not in near
    above = sentence({12: 500, 24: 530}, 474)
    assert "could change with a stronger attack" in above
