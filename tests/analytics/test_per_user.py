"""Per-user access (issue 24, ``[analytics] access = "per_user"``): a real analytics daemon on a
generated fleet, asked over HTTP as alice, as bob, as an admin, as nobody, with a forged proxy
header and through a trusted proxy. Alice's every served format (the landing page, the HTML,
Markdown, JSON and each CSV table) holds none of the other users' names or job ids; an admin
gets the files as written; /metrics is the admins'; open access is what it always was."""

from __future__ import annotations

import base64
import csv
import dataclasses
import http.client
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import bcrypt
import pytest
from pydantic import ValidationError

from analytics import synthetic
from analytics.config import FullSettings
from analytics.daemon import Analytics
from analytics.report import from_json, to_html, to_json, to_markdown
from analytics.report.access import LEFT_OUT, banner, for_user
from analytics.report.csvio import TABLES
from analytics.synthetic import Fleet
from daemonkit.settings import ConfigError
from domain.week import Window
from gpuledger.up import exporter_settings
from tests.support.clock import ANCHOR, clock_now
from tests.support.reports import sample_report
from tests.support.wait import wait_until

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

TZ = "UTC"
PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "root": "root-pw"}
HASHES = {u: bcrypt.hashpw(p.encode(), bcrypt.gensalt(4)).decode() for u, p in PASSWORDS.items()}
PROXY = "127.0.0.2"  # a loopback address of its own: the trusted proxy's
HEADER = "X-Forwarded-User"


def _fleet(tmp: Path) -> tuple[Fleet, Path]:
    now = clock_now() // 60 * 60
    window = Window(now - 15 * 86400, now, "test", TZ)
    fleet = synthetic.generate(window, hosts=1, gpus_per_host=2, seed=3, anchor=ANCHOR)
    synthetic.write_history(fleet, tmp / "history.db")
    return fleet, tmp / "history.db"


def _users_file(tmp: Path) -> Path:
    """alice and bob in an htpasswd file (as ``htpasswd -B`` writes it: ``$2y$``), root inline."""
    path = tmp / "users.htpasswd"
    lines = [f"{u}:{HASHES[u].replace('$2b$', '$2y$', 1)}" for u in ("alice", "bob")]
    path.write_text("# gpuledger users\n" + "\n".join(lines) + "\n")
    return path


def _start(tmp: Path, history: Path, web: dict[str, Any] | None = None, **analytics: Any) -> Analytics:
    settings = FullSettings(
        analytics={
            "source": "embedded",
            "history": history,
            "reports_dir": tmp / "reports",
            "timezone": TZ,
            "listen": "127.0.0.1:0",
            **analytics,
        },
        web=web or {"basic_auth_users": HASHES},
    )
    a = Analytics(settings, clock=clock_now)
    a.start()
    assert wait_until(lambda: {"week", "rolling_7d"} <= a.reports().keys(), 60)
    return a


@pytest.fixture(scope="module")
def fleet_history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Fleet, Path]:
    return _fleet(tmp_path_factory.mktemp("per-user-fleet"))


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, fleet_history: tuple[Fleet, Path]) -> Iterator[Analytics]:
    tmp = tmp_path_factory.mktemp("per-user")
    a = _start(
        tmp,
        fleet_history[1],
        {"basic_auth_users": {"root": HASHES["root"]}, "basic_auth_users_file": _users_file(tmp)},
        access="per_user",
        admins=["root"],
        proxy_user_header=HEADER,
        trusted_proxies=[f"{PROXY}/32"],
    )
    try:
        label = a.reports()["week"].week
        focus = tmp / "reports" / f"gpuledger-{label}-focus"  # as `gpuledger report --focus --out` writes it
        focus.mkdir()
        (focus / "user.csv").write_text("BilledCost,SubAccountName\n1.0,bob\n")
        yield a
    finally:
        a.stop()


def _get(
    a: Analytics, path: str, user: str | None = None, headers: dict[str, str] | None = None, source: str | None = None
) -> tuple[int, bytes]:
    host, port = a.server.server_address[:2]
    conn = http.client.HTTPConnection(str(host), int(port), timeout=30, source_address=(source, 0) if source else None)
    sent = dict(headers or {})
    if user is not None:
        sent["Authorization"] = "Basic " + base64.b64encode(f"{user}:{PASSWORDS.get(user, 'x')}".encode()).decode()
    try:
        conn.request("GET", path, headers=sent)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _paths(a: Analytics) -> list[str]:
    label = a.reports()["week"].week
    return [
        "/",
        *(f"/reports/gpuledger-{label}.{ext}" for ext in ("html", "md", "json")),
        *(f"/reports/gpuledger-{label}-csv/{t}.csv" for t in TABLES),
    ]


def _owners(fleet: Fleet) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for j in fleet.jobs:
        out.setdefault(j.user, set()).add(j.job_id)
    return out


def _named(body: bytes, word: str) -> bool:
    """Whether ``word`` (a user name, a job id) stands in ``body`` as itself, not inside a longer
    word or number (job id 1002 is no part of 11002.5 or 0.1002)."""
    return re.search(rb"(?<![\w.])" + re.escape(word.encode()) + rb"(?!\w|\.\d)", body) is not None


def _others(fleet: Fleet, me: str) -> list[str]:
    owners = _owners(fleet)
    return [w for user, jobs in owners.items() if user != me for w in (user, *jobs)]


@pytest.mark.integration
@pytest.mark.parametrize("me", ["alice", "bob"])
def test_a_user_sees_only_their_own_rows_in_every_format(
    daemon: Analytics, fleet_history: tuple[Fleet, Path], me: str
) -> None:
    fleet = fleet_history[0]
    mine, others = _owners(fleet)[me], _others(fleet, me)
    for path in _paths(daemon):
        code, body = _get(daemon, path, me)
        assert code == 200, path
        leaked = [w for w in others if _named(body, w)]
        assert leaked == [], f"{path} shows {leaked[:10]}"
    code, body = _get(daemon, f"/reports/gpuledger-{daemon.reports()['week'].week}.json", me)
    r = from_json(body)
    assert {x.key for x in r.group("user")} == {me}
    jobs = {x.key for x in r.group("job")}
    assert jobs and jobs <= mine
    assert {x.group for x in r.rows} <= {"user", "job"}  # no fleet totals by default
    assert r.fleet.total_cost == pytest.approx(r.group("user")[0].total_cost)
    assert {x.user for x in r.idle_holders} | {x.user for x in r.stalled_jobs} <= {me}
    assert r.daily == [] and r.queue == [] and r.failures == [] and r.deltas == []
    costs = list(csv.DictReader(io.StringIO(_get(daemon, _paths(daemon)[-len(TABLES)], me)[1].decode())))
    assert {c["key"] for c in costs if c["group"] == "job"} == jobs


@pytest.mark.integration
def test_an_admin_sees_everything_as_written(daemon: Analytics, fleet_history: tuple[Fleet, Path]) -> None:
    folder = daemon.reports_dir
    for path in _paths(daemon)[1:]:
        code, body = _get(daemon, path, "root")
        assert code == 200 and body == (folder / path.removeprefix("/reports/")).read_bytes(), path
    r = from_json(_get(daemon, _paths(daemon)[3], "root")[1])
    owners = _owners(fleet_history[0])
    assert {x.key for x in r.group("user")} == set(owners)
    # what a user's view must not show is there to find: the check is not vacuous
    for path in _paths(daemon)[1:4]:
        body = _get(daemon, path, "root")[1]
        assert all(_named(body, u) for u in owners), path
        assert all(any(_named(body, j) for j in jobs) for jobs in owners.values()), path
    code, body = _get(daemon, "/metrics", "root")
    assert code == 200 and b"gpuledger_" in body
    label = daemon.reports()["week"].week
    assert _get(daemon, f"/reports/gpuledger-{label}-focus/user.csv", "root")[0] == 200


@pytest.mark.integration
def test_unknown_users_forged_headers_and_metrics_are_refused(daemon: Analytics) -> None:
    label = daemon.reports()["week"].week
    page = f"/reports/gpuledger-{label}.html"
    assert _get(daemon, page)[0] == 401  # no credentials
    assert _get(daemon, page, "mallory")[0] == 401  # an unknown user
    assert _get(daemon, page, headers={"Authorization": "Basic " + base64.b64encode(b"alice:wrong").decode()})[0] == 401
    # the proxy's header from an address that is no trusted proxy: refused, credentials or not
    assert _get(daemon, page, headers={HEADER: "root"})[0] == 403
    assert _get(daemon, page, "alice", headers={HEADER: "root"})[0] == 403
    assert _get(daemon, "/metrics", headers={HEADER: "root"})[0] == 403
    # /metrics: the admins'
    assert _get(daemon, "/metrics")[0] == 401
    assert _get(daemon, "/metrics", "alice")[0] == 403
    # the FOCUS export adds up to the fleet: refused to a user, not cut
    assert _get(daemon, f"/reports/gpuledger-{label}-focus/user.csv", "alice")[0] == 403
    # the probes need nobody
    assert _get(daemon, "/livez")[0] == 200 and _get(daemon, "/healthz")[0] == 200


@pytest.mark.integration
def test_a_trusted_proxy_names_the_user(daemon: Analytics, fleet_history: tuple[Fleet, Path]) -> None:
    label = daemon.reports()["week"].week
    path = f"/reports/gpuledger-{label}.json"
    code, body = _get(daemon, path, headers={HEADER: "alice"}, source=PROXY)
    assert code == 200
    assert {x.key for x in from_json(body).group("user")} == {"alice"}
    assert [w for w in _others(fleet_history[0], "alice") if _named(body, w)] == []
    code, body = _get(daemon, path, headers={HEADER: "root"}, source=PROXY)
    assert code == 200 and body == (daemon.reports_dir / path.removeprefix("/reports/")).read_bytes()
    assert _get(daemon, "/metrics", headers={HEADER: "root"}, source=PROXY)[0] == 200
    assert _get(daemon, "/metrics", headers={HEADER: "alice"}, source=PROXY)[0] == 403
    assert _get(daemon, path, source=PROXY)[0] == 401  # the proxy sent no user
    assert _get(daemon, path, headers={HEADER: " "}, source=PROXY)[0] == 401
    # a name that is no user's sees no one's rows
    code, body = _get(daemon, path, headers={HEADER: "(unknown)"}, source=PROXY)
    assert code == 200 and from_json(body).group("job") == []


@pytest.mark.integration
def test_fleet_totals_where_the_site_allows_them(tmp_path: Path, fleet_history: tuple[Fleet, Path]) -> None:
    a = _start(tmp_path, fleet_history[1], access="per_user", admins=["root"], per_user_fleet_totals=True)
    try:
        path = f"/reports/gpuledger-{a.reports()['week'].week}.json"
        code, body = _get(a, path, "alice")
        assert code == 200
        r, full = from_json(body), from_json(_get(a, path, "root")[1])
        assert r.fleet == full.fleet and r.group("host") == full.group("host") and r.daily == full.daily
        assert {x.key for x in r.group("user")} == {"alice"}
        for p in _paths(a):
            body = _get(a, p, "alice")[1]
            assert [w for w in _others(fleet_history[0], "alice") if _named(body, w)] == [], p
        # after a restart, the report on disk is still cut by its jobs' users
        a.stop()
        a = _start(tmp_path, fleet_history[1], access="per_user", admins=["root"], per_user_fleet_totals=True)
        with a._lock:
            a._owners.clear()
        jobs = {x.key for x in from_json(_get(a, path, "alice")[1]).group("job")}
        assert jobs and jobs <= _owners(fleet_history[0])["alice"]
    finally:
        a.stop()


@pytest.mark.integration
def test_open_access_is_unchanged(tmp_path: Path, fleet_history: tuple[Fleet, Path]) -> None:
    a = _start(tmp_path, fleet_history[1])
    try:
        for path in _paths(a)[1:]:
            code, body = _get(a, path, "alice")
            assert code == 200 and body == (a.reports_dir / path.removeprefix("/reports/")).read_bytes()
        assert _get(a, "/metrics", "alice")[0] == 200
        assert _get(a, "/metrics")[0] == 401
        assert _get(a, "/metrics", "alice", headers={HEADER: "root"})[0] == 200  # no proxy header is read
        assert not list(a.reports_dir.glob(".*owners*"))
    finally:
        a.stop()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("alice\n", ":1: not a user:hash line"),
        ("# a comment\n\ncarol:plain-password\n", ":3: user 'carol': password hash must be a bcrypt hash"),
        (f"alice:{HASHES['alice']}\nalice:{HASHES['alice']}\n", ":2: user 'alice' given twice"),
        (f"root:{HASHES['root']}\n", "'root' is in basic_auth_users too"),
    ],
    ids=["no-colon", "plain-password", "twice", "root-too"],  # the hashes' salts differ per xdist worker
)
def test_the_users_file_is_checked(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "users"
    path.write_text(text)
    with pytest.raises(ValidationError, match=re.escape(error)) as got:
        FullSettings(web={"basic_auth_users": {"root": HASHES["root"]}, "basic_auth_users_file": path})
    assert "plain-password" not in str(got.value) and HASHES["alice"][7:] not in str(got.value)  # no secret echoed


def test_the_users_file_adds_users(tmp_path: Path) -> None:
    s = FullSettings(
        web={"basic_auth_users": {"root": HASHES["root"]}, "basic_auth_users_file": _users_file(tmp_path)},
        analytics={"access": "per_user", "admins": ["root", "alice"]},
    )
    assert sorted(s.web.basic_auth_users) == ["alice", "bob", "root"]


@pytest.mark.parametrize(
    ("analytics", "web", "field"),
    [
        ({"access": "per_user"}, {"basic_auth_users": HASHES}, "analytics.admins"),
        ({"access": "per_user", "admins": ["root"]}, {}, "web.basic_auth_users"),
        ({"access": "per_user", "admins": ["nobody"]}, {"basic_auth_users": HASHES}, "analytics.admins"),
        ({"access": "shared"}, {}, "access"),
        ({"admins": ["root"]}, {}, "analytics.admins"),
        ({"access": "per_user", "admins": ["a"], "proxy_user_header": HEADER}, {}, "trusted_proxies"),
        (
            {"access": "per_user", "admins": ["a"], "proxy_user_header": HEADER, "trusted_proxies": ["10.0.0.256"]},
            {},
            "10.0.0.256",
        ),
        (
            {"access": "per_user", "admins": ["a"], "proxy_user_header": "X User", "trusted_proxies": ["10.0.0.0/8"]},
            {},
            "HTTP header name",
        ),
        ({"access": "per_user", "admins": [" a"], "proxy_user_header": HEADER, "trusted_proxies": ["::1"]}, {}, "a"),
    ],
)
def test_settings_are_checked(analytics: dict[str, Any], web: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(field)):
        FullSettings(analytics=analytics, web=web)


@pytest.mark.integration
def test_alices_page_renders_in_chromium_with_only_her_rows(
    daemon: Analytics, fleet_history: tuple[Fleet, Path], browser: tuple[WebDriver, Path]
) -> None:
    from selenium.webdriver.common.by import By

    label = daemon.reports()["week"].week
    base = daemon.url.replace("://", f"://alice:{PASSWORDS['alice']}@", 1)  # her credentials, as a browser sends them
    driver = browser[0]
    driver.get(f"{base}/reports/gpuledger-{label}.html")  # from the daemon
    logs: list[dict[str, Any]] = driver.get_log("browser")  # type: ignore[no-untyped-call]
    assert [e for e in logs if e.get("level") == "SEVERE"] == []
    text = driver.find_element(By.TAG_NAME, "body").text
    assert "alice" in text
    shown = [w for w in _others(fleet_history[0], "alice") if _named(text.encode(), w)]
    assert shown == []
    mine = _owners(fleet_history[0])["alice"]
    assert any(_named(text.encode(), j) for j in mine)
    assert driver.find_elements(By.CSS_SELECTOR, "svg")  # the charts are drawn
    assert driver.title.startswith("GPU report")  # the report, not an error page
    driver.get(f"{base}/")  # her landing page too
    logs = driver.get_log("browser")  # type: ignore[no-untyped-call]
    assert [e for e in logs if e.get("level") == "SEVERE"] == []
    text = driver.find_element(By.TAG_NAME, "body").text
    assert (
        "Rolling 7 days" in text and [w for w in _others(fleet_history[0], "alice") if _named(text.encode(), w)] == []
    )
    assert json.loads(_get(daemon, "/healthz")[1])["status"] == "ok"


def test_the_cut_keeps_only_the_users_own_and_drops_lines_naming_others() -> None:
    r = dataclasses.replace(
        sample_report(hostile=False),
        notes=["job slurm:4301 claims account x", "prices from the example rule"],
        approximations=["bob's jobs read from sacct"],
    )
    owners = {"slurm:4242": "alice", "slurm:4711": "carol", "slurm:4301": "bob"}
    cut = for_user(r, "bob", owners, fleet_totals=False)
    assert [(x.group, x.key) for x in cut.rows] == [("user", "bob"), ("job", "slurm:4301")]
    assert cut.fleet.total_cost == r.group("user")[2].total_cost
    assert [x.job for x in cut.idle_holders] == ["slurm:4301"] and cut.stalled_jobs == []
    assert cut.notes == [*r.notes, banner("bob", False)]  # bob's own job's note is his to read
    assert cut.approximations == r.approximations
    alice = for_user(r, "alice", owners, fleet_totals=True)
    assert alice.fleet == r.fleet and alice.daily == r.daily and alice.group("host") == r.group("host")
    assert {x.key for x in alice.group("user")} == {"alice"} and LEFT_OUT in alice.notes
    assert all("bob" not in x and "slurm:4301" not in x for x in (*alice.notes, *alice.approximations))
    nobody = for_user(r, "(unknown)", {**owners, "slurm:9": "(unknown)"}, fleet_totals=False)
    assert nobody.rows == [] and nobody.idle_holders == [] and nobody.fleet.total_cost == 0
    for render in (to_html, to_markdown, to_json):
        text = render(for_user(r, "alice", owners, fleet_totals=False))
        assert "carol" not in text and "slurm:4711" not in text and "slurm:4301" not in text


def test_up_gives_the_exporters_metrics_to_the_admins_only() -> None:
    s = FullSettings(web={"basic_auth_users": HASHES}, analytics={"access": "per_user", "admins": ["root"]})
    assert exporter_settings(s).web.basic_auth_users == {"root": HASHES["root"]}
    assert exporter_settings(s).analytics == s.analytics
    open_ = FullSettings(web={"basic_auth_users": HASHES})
    assert exporter_settings(open_) is open_
    proxied = FullSettings(
        analytics={"access": "per_user", "admins": ["root"], "proxy_user_header": HEADER, "trusted_proxies": [PROXY]}
    )
    with pytest.raises(ConfigError, match=re.escape("analytics.admins")):
        exporter_settings(proxied)
