"""Hostile and broken configuration: files (aliases that expand, wrong encodings, wrong shapes, too
large), the environment, label values and the whole file for every command. Each is one
ConfigError naming the file, field or variable (exit 2 from a command), bounded in length,
never a traceback and never a hang."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from analytics.config import FullSettings
from daemonkit.config_file import MAX_BYTES, MAX_VALUES
from daemonkit.settings import MAX_ERRORS, ConfigError, clip, load_settings, shown_value
from exporter import config
from exporter.config import MAX_LABEL_VALUE
from tests.support.processes import run_cli


def laughs(levels: int, use: str = "exporter:\n  hostname: *l{last}\n") -> str:
    """A "billion laughs" YAML document: each level nine aliases of the one before."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]")
    return "\n".join(lines) + "\n" + use.format(last=levels)


def merge_laughs(levels: int) -> str:
    """The same through ``<<`` merge keys of mappings."""
    lines = ["m0: &m0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9}"]
    for i in range(1, levels + 1):
        keys = ", ".join(f"k{j}: *m{i - 1}" for j in range(9))
        lines.append(f"m{i}: &m{i} {{{keys}}}")
    return "\n".join(lines) + f"\nexporter:\n  <<: *m{levels}\n"


def load_file(tmp_path: Path, name: str, content: str | bytes) -> FullSettings:
    f = tmp_path / name
    if isinstance(content, bytes):
        f.write_bytes(content)
    else:
        f.write_text(content)
    return load_settings(FullSettings, f)


def one_config_error(tmp_path: Path, name: str, content: str | bytes) -> str:
    with pytest.raises(ConfigError) as e:
        load_file(tmp_path, name, content)
    msg = str(e.value)
    assert len(msg) < (MAX_ERRORS + 2) * 600, msg[:300]
    return msg


@pytest.mark.parametrize("levels", [4, 8, 12, 30])
@pytest.mark.parametrize(
    "use",
    [
        "exporter:\n  hostname: *l{last}\n",  # a string field: the old error printed the whole expansion
        "bench:\n  benches: *l{last}\n",  # a list field: validation would walk it
        "nowhere: *l{last}\n",  # an unknown section
        "",  # not used at all
    ],
)
def test_aliases_that_expand_beyond_the_bound_are_refused(tmp_path: Path, levels: int, use: str) -> None:
    text = laughs(levels, use)
    assert len(text) < 2000  # a small file...
    msg = one_config_error(tmp_path, "laughs.yaml", text)  # ...refused, not expanded (9**30 values)
    if 9 ** (levels + 1) > MAX_VALUES:
        assert "more than 100,000 values once its aliases are expanded" in msg
        assert "laughs.yaml" in msg and "\n" not in msg


def test_merge_key_expansion_is_bounded_too(tmp_path: Path) -> None:
    msg = one_config_error(tmp_path, "merge.yaml", merge_laughs(20))
    assert "aliases are expanded" in msg


def test_aliases_within_the_bound_still_work(tmp_path: Path) -> None:
    """Anchors and merge keys are ordinary YAML (the compose file uses them): kept."""
    text = (
        "x-rule: &rule {kind: owned, purchase_price: 30000, depreciation_years: 4}\n"
        "x-ex: &ex {sample_interval: 2}\n"
        "exporter:\n  <<: *ex\n  hostname: node-a\n"
        "cost:\n  rules:\n    - {<<: *rule, match_model: H200}\n    - {<<: *rule, match_model: H100}\n"
    )
    with pytest.raises(ConfigError, match=r"x-rule: unknown setting"):
        load_file(tmp_path, "ok.yaml", text)  # the anchors' own keys are still unknown sections
    s = load_file(tmp_path, "ok2.yaml", INLINE_ANCHORS)
    assert s.exporter.sample_interval == 2 and s.exporter.hostname == "node-a"
    assert [r.match_model for r in s.cost.rules] == ["H200", "H100"]
    assert {r.purchase_price for r in s.cost.rules} == {30000}


INLINE_ANCHORS = (
    "exporter:\n  sample_interval: 2\n  hostname: node-a\n"
    "cost:\n  rules:\n"
    "    - &rule {kind: owned, purchase_price: 30000, depreciation_years: 4, match_model: H200}\n"
    "    - {<<: *rule, match_model: H100}\n"
)
"""The anchors defined where they are first used, so no unknown section holds them."""


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    assert "refers to the node that contains it" in one_config_error(tmp_path, "rec.yaml", "a: &a [1, *a]\n")
    assert "refers to the node" in one_config_error(tmp_path, "rec2.yaml", "exporter: &e\n  x: *e\n")


@pytest.mark.parametrize(
    ("name", "content", "named"),
    [
        ("latin1.toml", '[exporter]\nhostname = "n\xf6de"\n'.encode("latin-1"), "latin1.toml:2: not UTF-8 text"),
        ("latin1.yaml", "exporter:\n  hostname: n\xf6de\n".encode("latin-1"), "latin1.yaml:2: not UTF-8 text"),
        ("utf16.toml", '[exporter]\nhostname = "x"\n'.encode("utf-16"), "UTF-16 text; save it as UTF-8"),
        ("binary.toml", bytes(range(256)) * 4, "not UTF-8 text"),
        ("nul.yaml", "exporter:\n  hostname: a\x00b\n", "nul.yaml:2: character #x0000 is not allowed"),
        ("bad.toml", "[exporter]\nreader = 'nvml'\nsample_interval = = 2\n", "bad.toml:3: Invalid value"),
        ("end.toml", "[exporter]\nreader", "end.toml: Expected '=' after a key"),
        ("dup.toml", "[exporter]\nreader = 'a'\nreader = 'b'\n", "dup.toml:3:"),
        ("bad.yaml", "exporter:\n  reader: [unclosed\n", "bad.yaml:3: while parsing a flow sequence"),
        ("tabs.yaml", "exporter:\n\treader: nvml\n", "tabs.yaml:2:"),
        ("two.yaml", "a: 1\n---\nb: 2\n", "two.yaml:2: expected a single document"),
        ("tag.yaml", 'exporter: !!python/object/apply:os.system ["true"]\n', "could not determine a constructor"),
        ("list.yaml", "- exporter\n- web\n", "the top level must be a table of sections, not a list"),
        ("scalar.yaml", "42\n", "the top level must be a table of sections, not a number"),
        ("string.yml", "hello\n", "the top level must be a table of sections, not a string"),
        ("deep.toml", "a = " + "[" * 100_000, "deep.toml: nested too deeply"),
        ("deep.yaml", "a: " + "[" * 100_000, "deep.yaml:1:"),
        ("deepblock.yaml", "".join(" " * i + "a:\n" for i in range(3000)), "deepblock.yaml"),
        ("big.toml", "# padding\n" * (MAX_BYTES // 10 + 1), "big.toml: larger than 1 MiB"),
        ("values.toml", "[bench]\nbenches = [" + ",".join(["1"] * (MAX_VALUES + 1)) + "]\n", "more than 100,000"),
    ],
)
def test_a_broken_file_is_one_line_naming_it(tmp_path: Path, name: str, content: str | bytes, named: str) -> None:
    msg = one_config_error(tmp_path, name, content)
    assert named in msg
    assert msg.startswith(f"config file {tmp_path / name}"), msg
    assert "\n" not in msg and len(msg) < 400


def test_a_file_that_is_not_a_readable_regular_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Is a directory"):
        load_settings(FullSettings, tmp_path)
    with pytest.raises(ConfigError, match=re.escape("absent.toml: No such file or directory")):
        load_settings(FullSettings, tmp_path / "absent.toml")
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=re.escape("fifo.toml: not a regular file")):  # would block at open
        load_settings(FullSettings, fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_settings(FullSettings, "/dev/zero")
    link = tmp_path / "link.toml"
    (tmp_path / "real.toml").write_text('[exporter]\nhostname = "via-link"\n')
    link.symlink_to(tmp_path / "real.toml")  # a ConfigMap mount is a link to a regular file: fine
    assert load_settings(FullSettings, link).exporter.hostname == "via-link"


def test_an_unreadable_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root (as CI runs) reads a mode-000 file anyway: the refusal a user meets is raised by hand."""
    f = tmp_path / "secret.toml"
    f.write_text("[exporter]\n")
    real_open = Path.open

    def refuse(self: Path, *args: Any, **kw: Any) -> Any:
        if self.name == "secret.toml":
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kw)

    monkeypatch.setattr(Path, "open", refuse)
    with pytest.raises(ConfigError, match=re.escape("secret.toml: Permission denied")):
        load_settings(FullSettings, f)


@pytest.mark.parametrize(
    ("content", "shown"),
    [
        ('[analytics]\ntimezone = "' + "Z" * 500_000 + '"\n', "characters)"),
        ("[exporter]\n" + "k" * 500_000 + " = 1\n", "500,000 characters"),
        ('[exporter]\nhostname = "a\\u001b[31mred\\u0007"\n', "\\x1b[31mred\\x07"),
        ("[bench]\nbenches = [" + ",".join(['"x"'] * 50_000) + "]\n", "unknown benchmark"),
    ],
)
def test_what_is_echoed_into_an_error_is_bounded_and_escaped(tmp_path: Path, content: str, shown: str) -> None:
    msg = one_config_error(tmp_path, "c.toml", content)
    assert shown in msg
    assert "\x1b" not in msg and "\x07" not in msg
    assert all(len(line) < 1000 for line in msg.splitlines())


def test_many_mistakes_list_the_first_twenty(tmp_path: Path) -> None:
    msg = one_config_error(tmp_path, "c.toml", "[cost]\n" + "".join(f"k{i} = 1\n" for i in range(500)))
    lines = msg.splitlines()
    assert len(lines) == 1 + MAX_ERRORS + 1 and lines[-1] == f"  ... and {500 - MAX_ERRORS} more"


def test_shown_values_are_bounded_for_shared_and_huge_inputs() -> None:
    shared: list[object] = ["lol"] * 9
    for _ in range(30):
        shared = [shared] * 9  # 9**30 leaves, 270 objects
    assert len(shown_value(shared)) < 250
    assert len(shown_value("x" * 10**7)) < 250
    assert clip("a\nb\x1bc") == "a\\nb\\x1bc"
    assert clip("y" * 300).endswith("… (300 characters)")


@pytest.mark.parametrize(
    ("content", "hint"),
    [
        ("[exporter]\nsample_intervall = 2\n", "exporter.sample_intervall: unknown setting in"),
        ("[exporter]\nsample_intervall = 2\n", "did you mean 'sample_interval'?"),
        ("[exportr]\nreader = 'nvml'\n", "exportr: unknown setting in"),
        ("[exportr]\nreader = 'nvml'\n", "did you mean 'exporter'?"),
        ('[cost]\ncurrencyy = "EUR"\n', "did you mean 'currency'?"),
        ("[[cost.rules]]\nmatch_model = 'H200'\npurchase_prise = 1\n", "cost.rules.0.purchase_prise"),
        ("[[cost.rules]]\nmatch_model = 'H200'\npurchase_prise = 1\n", "did you mean 'purchase_price'?"),
        ("[prometheus]\nurll = 'http://x'\n", "did you mean 'url'?"),
    ],
)
def test_unknown_keys_get_a_did_you_mean(tmp_path: Path, content: str, hint: str) -> None:
    assert hint in one_config_error(tmp_path, "c.toml", content)


def test_no_did_you_mean_when_nothing_is_close(tmp_path: Path) -> None:
    assert "did you mean" not in one_config_error(tmp_path, "c.toml", "[zzzzzz]\nq = 1\n")


@pytest.mark.parametrize(
    ("name", "named"),
    [
        ("GPULEDGER_BOGUS__X", "GPULEDGER_BOGUS__X: unknown section 'bogus' in the environment"),
        ("GPULEDGER_EXPORTR__READER", "did you mean 'exporter'?"),
        ("gpuledger_costs__currency", "did you mean 'cost'?"),
        ("GPULEDGER_WEB_LISTEN__X", "unknown section 'web_listen'"),
        ("GPULEDGER_EXPORTER__READERR", "exporter.readerr: unknown setting (from GPULEDGER_EXPORTER__READERR)"),
        ("GPULEDGER_EXPORTER__READERR", "did you mean 'reader'?"),
        ("GPULEDGER_COST__CURRENCYY", "cost.currencyy: unknown setting (from GPULEDGER_COST__CURRENCYY)"),
        ("GPULEDGER_EXPORTER", "GPULEDGER_EXPORTER: invalid configuration in the environment"),
    ],
)
def test_unknown_environment_sections_and_keys_are_alike(
    monkeypatch: pytest.MonkeyPatch, name: str, named: str
) -> None:
    monkeypatch.setenv(name, "{not json")
    with pytest.raises(ConfigError) as e:
        load_settings(FullSettings)
    assert named in str(e.value)
    if "section" in named:  # the exporter's model too: its section names are the same
        with pytest.raises(ConfigError, match="unknown section"):
            config.load()


@pytest.mark.parametrize(
    "name",
    [
        "GPULEDGER_CONFIG",
        "GPULEDGER_TEST_NOW",
        "GPULEDGER_UPDATE_GOLDEN",
        "GPULEDGER_HYPOTHESIS_EXAMPLES",
        "GPULEDGER_BIND",
        "GPULEDGER_TIMEZONE",
        "GPULEDGER_SERVICES",
        "GPULEDGER_",
        "GPULEDGERX__Y",
    ],
)
def test_the_projects_other_variables_are_not_settings(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(name, "")  # empty: GPULEDGER_CONFIG="" names no file
    assert load_settings(FullSettings).log_level == "info"


def test_hostname_is_a_bounded_printable_label_value(monkeypatch: pytest.MonkeyPatch) -> None:
    ok = "n" * MAX_LABEL_VALUE
    assert config.load(None, {"exporter": {"hostname": ok}}).exporter.hostname == ok
    for bad in ("n" * (MAX_LABEL_VALUE + 1), "n" * 60_000_000, "a\nb", "a\tb", "node\x1b[2J", "", "\u2028"):
        with pytest.raises(ConfigError, match=r"exporter\.hostname") as e:
            config.load(None, {"exporter": {"hostname": bad}})
        assert len(str(e.value)) < 600
    monkeypatch.setenv("GPULEDGER_EXPORTER__HOSTNAME", "x" * 100_000)
    with pytest.raises(ConfigError, match=r"exporter\.hostname: String should have at most 253 characters"):
        load_settings(FullSettings)


TYPOS = '[cost]\ncurrencyy = "EUR"\n\n[analytics]\ntimezone = "Europe/Berln"\n'
LAUGHS = laughs(8)


@pytest.mark.integration
@pytest.mark.parametrize(
    "command",
    [
        ["exporter", "--check-config"],
        ["exporter", "--listen", "127.0.0.1:0", "--reader", "replay", "--no-history"],
        ["report", "--history", "/no/such/history.db"],
        ["up", "--listen", "127.0.0.1:0", "--analytics-listen", "127.0.0.1:0", "--reader", "replay"],
        ["analytics", "--listen", "127.0.0.1:0"],
    ],
    ids=["exporter-check", "exporter", "report", "up", "analytics"],
)
@pytest.mark.parametrize(
    ("name", "content", "env", "named"),
    [
        ("typos.toml", TYPOS, {}, "cost.currencyy: unknown setting"),
        ("typos.toml", TYPOS, {}, "analytics.timezone: unknown time zone 'Europe/Berln'"),
        ("laughs.yaml", LAUGHS, {}, "laughs.yaml: more than 100,000 values once its aliases are expanded"),
        ("latin1.toml", b'[exporter]\nhostname = "n\xf6de"\n', {}, "latin1.toml:2: not UTF-8 text"),
        ("ok.toml", "", {"GPULEDGER_BOGUS__X": "1"}, "GPULEDGER_BOGUS__X: unknown section"),
        ("ok.toml", "", {"GPULEDGER_EXPORTER__HOSTNAME": "h" * 100_000}, "exporter.hostname"),
    ],
    ids=["cost-typo", "timezone-typo", "billion-laughs", "latin1", "env-section", "long-hostname"],
)
def test_every_command_refuses_the_same_file_with_exit_2(
    tmp_path: Path, command: list[str], name: str, content: str | bytes, env: dict[str, str], named: str
) -> None:
    f = tmp_path / name
    f.write_bytes(content if isinstance(content, bytes) else content.encode())
    res = run_cli(*command, "--config", str(f), env=env, timeout=60)  # a hang fails here
    assert res.returncode == 2, res.stdout + res.stderr[-2000:]
    assert named in res.stderr, res.stderr[:2000]
    assert "Traceback" not in res.stderr and len(res.stderr) < 3000


@pytest.mark.integration
def test_check_config_accepts_a_good_file(tmp_path: Path) -> None:
    f = tmp_path / "good.yaml"
    f.write_text(INLINE_ANCHORS + "analytics:\n  timezone: Europe/Berlin\n")
    res = run_cli("exporter", "--check-config", "--config", str(f))
    assert (res.returncode, res.stdout.strip()) == (0, "gpuledger exporter: configuration ok"), res.stderr


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ('[cost]\ncurrency = "E\\u001b[2JUR"\n', "cost.currency: must be printable"),
        ('[cost]\ncurrency = "EU\\nR"\n', "cost.currency: must be printable"),
        (
            '[[budgets.rules]]\ngroup = "user"\nkey = "al\\u001bice"\ncurrency = 5\n',
            "budgets.rules.0.key: must be printable",
        ),
        (
            '[[budgets.rules]]\ngroup = "account"\nkey = "' + "k" * 300 + '"\ngpu_hours = 5\n',
            "budgets.rules.0.key: String should have at most 253 characters",
        ),
    ],
)
def test_analytics_values_that_become_label_values_are_printable_and_bounded(
    tmp_path: Path, content: str, named: str
) -> None:
    """[cost] currency and a budget's key are label values of the analytics' gauges (currency,
    key): a control character or a 300-character key is refused, as the exporter's hostname is."""
    msg = one_config_error(tmp_path, "c.toml", content)
    assert named in msg and "\x1b" not in msg


def test_a_ca_file_with_verification_off_is_refused(tmp_path: Path) -> None:
    """A CA bundle turned verification back on behind verify_tls = false; the pair contradicts."""
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    msg = one_config_error(tmp_path, "c.toml", f'[prometheus]\nverify_tls = false\nca_file = "{ca}"\n')
    assert "ca_file with verify_tls = false" in msg
