import pytest

from censusrecon.experiments.config import ConfigError, load_config, parse_config


def test_every_shipped_config_validates_and_names_its_command(root):
    for path in sorted((root / "configs").glob("**/*.yaml")):
        cfg = load_config(path)
        assert "Run: censusrecon " in path.read_text(), f"{path} must name the command that runs it"
        assert cfg.name


def test_unknown_or_misspelled_key_is_an_error_naming_it():
    with pytest.raises(ConfigError, match="unknown key 'atack'"):
        parse_config({"name": "x", "atack": {}})
    with pytest.raises(ConfigError, match="unknown key 'attack.rnus'"):
        parse_config({"name": "x", "attack": {"rnus": 3}})
    with pytest.raises(ConfigError, match="attack.runs"):
        parse_config({"name": "x", "attack": {"runs": 0}})
    with pytest.raises(ConfigError, match="data.path is required for source 'acs_nist'"):
        parse_config({"name": "x", "data": {"source": "acs_nist"}})
    with pytest.raises(ConfigError, match="distinct names"):
        parse_config({"name": "x", "queries": [{"k": 2}, {"k": 2}]})


def test_levels_baselines_and_inits_are_checked_against_the_data():
    from censusrecon.experiments.problem import check_against_data
    from censusrecon.microdata.population import PopulationSpec, embedded_population

    pop = embedded_population(0, PopulationSpec(states=1, counties_per_state=1, tracts_per_county=2))
    check_against_data(parse_config({"name": "x", "target": {"level": "block"}, "baselines": ["tract"]}), pop)
    with pytest.raises(ConfigError, match="baselines \\['tract'\\] are not valid for tract targets"):
        check_against_data(parse_config({"name": "x", "baselines": ["tract"]}), pop)
    with pytest.raises(ConfigError, match="with_block: true needs a block level below 'block'"):
        check_against_data(parse_config({"name": "x", "target": {"level": "block", "with_block": [True]},
                                         "baselines": ["tract"]}), pop)
    with pytest.raises(ConfigError, match="target.level 'puma' is not a level of this data"):
        check_against_data(parse_config({"name": "x", "target": {"level": "puma"}}), pop)
    with pytest.raises(ConfigError, match="attack.init \\['puma'\\] not valid"):
        check_against_data(parse_config({"name": "x", "attack": {"init": ["puma"]}}), pop)


def test_method_names_follow_the_workloads_and_initialisations():
    one = parse_config({"name": "x"})
    assert one.rap_method(one.queries[0], "random") == "rap_rank"
    assert one.rap_method(one.queries[0], "holdout") == "rap_rank_init_holdout"
    two = parse_config({"name": "x", "queries": [{"k": 2}, {"k": 3}]})
    assert [two.rap_method(q, "random") for q in two.queries] == ["rap_rank_2way", "rap_rank_3way"]


def test_overrides_apply_and_change_the_hash(root):
    base = load_config(root / "configs" / "tiny.yaml")
    over = load_config(root / "configs" / "tiny.yaml", ["attack.runs=7", "target.with_block=[false]"])
    assert over.attack.runs == 7 and over.target.with_block == [False]
    assert over.digest() != base.digest()
    assert load_config(root / "configs" / "tiny.yaml").digest() == base.digest()
    with pytest.raises(ConfigError, match="key=value"):
        load_config(root / "configs" / "tiny.yaml", ["attack.runs"])
    with pytest.raises(ConfigError, match="unknown key 'attack.run'"):
        load_config(root / "configs" / "tiny.yaml", ["attack.run=3"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(root / "configs" / "nope.yaml")


def test_the_papers_strength_is_one_setting(compact_agency):
    from censusrecon.reconstruct.attack_settings import PAPER_STRENGTH

    cfg = load_config(compact_agency, ["attack.strength=paper"])
    assert (cfg.attack.runs, cfg.attack.steps, cfg.attack.rows) == (100, 1000, 1000) == tuple(PAPER_STRENGTH.values())
    plain = load_config(compact_agency)
    assert plain.attack.runs == 24 and plain.digest() != cfg.digest()  # a different attack, a different results dir


def test_whole_units_attack_every_person_and_refuse_what_needs_a_holdout(root):
    import numpy as np

    from censusrecon.experiments.problem import load_population, resolve

    base = ["target.whole_units=true", "baselines=[county, state, national, chance]", "attack.init=[random]"]
    cfg = load_config(root / "configs" / "tiny.yaml", base)
    pop = load_population(cfg)
    unit = pop.geography.unit_ids("tract")[0]
    prob = resolve(cfg, pop).prepare(unit, with_block=True)
    assert len(prob.private) == int(pop.geography.mask("tract", unit).sum()) and len(prob.holdout) == 0
    listed = len(pop.geography.units_within("tract", unit, "block")[0])
    w = prob.block_weights  # an outsider's guess of where persons live: uniform over the public block list
    assert np.all(w[:listed] == 1) and np.all(w[listed:] == 0)
    assert "holdout" not in resolve(cfg, pop).priors(prob)
    with pytest.raises(ConfigError, match="no D_holdout"):
        load_config(root / "configs" / "tiny.yaml", ["target.whole_units=true"])
    # with a release, every mechanism releases (and the audit audits) the whole unit, as a file made elsewhere does
    rel = load_config(root / "configs" / "release_tiny.yaml", ["target.whole_units=true",
                                                               "baselines=[county, state, national, chance]"])
    rpop = load_population(rel)
    unit = rpop.geography.unit_ids("tract")[0]
    assert len(resolve(rel, rpop).private_half(unit, False)) == int(rpop.geography.mask("tract", unit).sum())


def test_the_rap_settings_are_defined_once():
    """The schema's RAP fields take their defaults from reconstruct.settings.RAPSettings, and rap_settings copies
    every shared field by name: a default config gives RAPSettings' own defaults, and a changed field arrives."""
    from censusrecon.reconstruct.attack_settings import AttackConfig
    from censusrecon.experiments.problem import rap_settings
    from censusrecon.reconstruct.settings import CONFIG_FIELDS, RAPSettings

    fields = AttackConfig.model_fields
    assert set(CONFIG_FIELDS) <= set(fields)
    assert {n: fields[n].default for n in CONFIG_FIELDS} == {n: getattr(RAPSettings(), n) for n in CONFIG_FIELDS}
    cfg = parse_config({"name": "x", "attack": {"rows": 77, "learning_rate": 0.1}})
    assert rap_settings(cfg) == RAPSettings(rows=77, learning_rate=0.1)
    assert rap_settings(cfg, steps=9).steps == 9
