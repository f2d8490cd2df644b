import pytest

from experiments.config import ConfigError, load_config, parse_config


def test_every_shipped_config_validates_and_names_its_command(root):
    for path in sorted((root / "configs").glob("**/*.yaml")):
        cfg = load_config(path)
        assert "censusrecon run" in path.read_text(), f"{path} must name the command that runs it"
        assert cfg.name


def test_unknown_or_misspelled_key_is_an_error_naming_it():
    with pytest.raises(ConfigError, match="unknown key 'atack'"):
        parse_config({"name": "x", "atack": {}})
    with pytest.raises(ConfigError, match="unknown key 'attack.rnus'"):
        parse_config({"name": "x", "attack": {"rnus": 3}})
    with pytest.raises(ConfigError, match="attack.runs"):
        parse_config({"name": "x", "attack": {"runs": 0}})
    with pytest.raises(ConfigError, match="baselines \\['tract'\\] are not valid for tract targets"):
        parse_config({"name": "x", "baselines": ["tract"]})
    with pytest.raises(ConfigError, match="with_block must be \\[false\\] for block targets"):
        parse_config({"name": "x", "target": {"level": "block"}})


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
