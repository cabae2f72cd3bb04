"""Layered settings (daemonkit.settings) in-process: pydantic-settings' own TOML and YAML sources,
the layer order, the file named by the environment, and one ConfigError naming what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel
from pydantic_settings import SettingsConfigDict

from analytics.config import FullSettings
from daemonkit.settings import ConfigError, LayeredSettings, load_settings
from exporter import config


class _Section(BaseModel):
    size: int = 1
    name: str = "default"


class DemoSettings(LayeredSettings):
    """A daemon that is not gpuledger: its own prefix, its own section."""

    model_config = SettingsConfigDict(env_prefix="DEMO_")
    part: _Section = _Section()


def test_another_prefix_layers_defaults_file_env_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "demo.toml"
    f.write_text('[part]\nsize = 3\nname = "from-file"\n')
    assert load_settings(DemoSettings, f).part == _Section(size=3, name="from-file")
    monkeypatch.setenv("DEMO_PART__SIZE", "4")
    assert load_settings(DemoSettings, f).part == _Section(size=4, name="from-file")  # env beats file
    assert load_settings(DemoSettings, f, {"part": {"size": 5}}).part.size == 5  # flags beat env
    monkeypatch.setenv("DEMO_CONFIG", str(f))
    monkeypatch.delenv("DEMO_PART__SIZE")
    assert load_settings(DemoSettings).part.name == "from-file"  # the file named by DEMO_CONFIG
    with pytest.raises(ConfigError, match=r"part\.size: Input should be a valid integer.*DEMO_PART__SIZE"):
        load_settings(DemoSettings, None, {"part": {"size": "big"}})


def test_a_loaded_settings_object_is_the_plain_class(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("exporter:\n  sample_interval: 3\n  hostname: node-a\n")
    s = config.load(f)
    assert type(s) is config.Settings  # not the class bound to the file for the load
    assert s == config.load(None, {"exporter": {"sample_interval": 3, "hostname": "node-a"}})
    assert s.model_fields_set == {"exporter"}
    assert config.Settings().exporter.sample_interval == 1.0  # the file stays with that one load


def test_the_analytics_sections_come_typed_from_the_same_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "c.toml"
    f.write_text('[analytics]\ntimezone = "Europe/Berlin"\n\n[cost]\ncurrency = "EUR"\n\n[exporter]\nhostname = "x"\n')
    monkeypatch.setenv("GPULEDGER_ANALYTICS__SOURCE", "prometheus")
    s = load_settings(FullSettings, f)
    assert type(s) is FullSettings
    assert (s.analytics.timezone, s.analytics.source, s.cost.currency, s.exporter.hostname) == (
        "Europe/Berlin",
        "prometheus",
        "EUR",
        "x",
    )
    with pytest.raises(ConfigError, match=r"analytics\.timezone: unknown time zone 'Mars/Olympus'"):
        load_settings(FullSettings, None, {"analytics": {"timezone": "Mars/Olympus"}})


@pytest.mark.parametrize(
    ("name", "text", "named"),
    [
        ("list.yaml", "- exporter\n- web\n", "the top level must be a table of sections"),
        ("scalar.yml", "42\n", "the top level must be a table of sections"),
        ("bad.toml", "[exporter\n", "Expected ']'"),
        ("bad.yaml", "exporter: [unclosed\n", "while parsing a flow sequence"),
        ("typo.toml", "[exporterr]\nreader = 'nvml'\n", "exporterr: unknown setting"),
        ("string.toml", '[exporter]\nsample_interval = "fast"\n', "exporter.sample_interval: Input should be a valid"),
    ],
)
def test_a_bad_file_is_one_config_error_naming_it(tmp_path: Path, name: str, text: str, named: str) -> None:
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        config.load(f)
    assert named in str(e.value)
    assert name in str(e.value)  # the file, or "set in <file>" after the field


def test_an_empty_yaml_file_is_the_defaults_and_a_missing_one_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty.yaml").write_text("")
    assert config.load(tmp_path / "empty.yaml").exporter == config.Settings().exporter
    with pytest.raises(ConfigError, match="No such file or directory"):
        config.load(tmp_path / "absent.toml")
    with pytest.raises(ConfigError, match="Is a directory"):
        config.load(tmp_path)


@pytest.mark.parametrize(
    ("interval", "stale", "got"),
    [(1.0, None, 10.0), (30.0, None, 90.0), (30.0, 45.0, 45.0), (0.5, 0.6, 0.6)],
)
def test_stale_after_follows_a_long_sample_interval_unless_set(
    interval: float, stale: float | None, got: float
) -> None:
    """--sample-interval 30 with the default stale_after of 10 s made /healthz flap 200/503 between
    rounds: unset, it is 3 intervals (at least 10 s); set, it is kept."""
    exp = {"sample_interval": interval, **({"stale_after": stale} if stale is not None else {})}
    assert config.Settings(exporter=exp).exporter.stale_after == got


def test_a_stale_after_within_one_interval_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "gpuledger.toml"
    path.write_text("[exporter]\nsample_interval = 30\nstale_after = 20\n")
    with pytest.raises(ConfigError, match=r"stale_after \(20 s\) must exceed sample_interval \(30 s\)"):
        load_settings(config.Settings, path)
