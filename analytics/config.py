"""Analytics settings: the source, the report, the daemon and the cost model. They live in the
same file, environment and flags as the exporter's (``exporter.config``), as sections
``[analytics]``, ``[prometheus]`` and ``[cost]``."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic.functional_validators import AfterValidator

from analytics.cost import CostModel
from analytics.report import groupings
from analytics.report.groupings import LABEL
from analytics.report.output import FORMATS
from daemonkit import crontab
from daemonkit.http import valid_user
from daemonkit.settings import check_timezone, split_listen
from exporter.config import MAX_LABEL_VALUE, Settings, check_label_value

LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}")  # an HTTP field name (RFC 9110 token), bounded
_BUDGETED = ", ".join(groupings.names(lambda g: g.budgets))  # the groupings [budgets] rules may name


def _statement_grouping(v: str) -> str:
    return groupings.check(v, lambda g: bool(g.statement)).name


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110's token
OWN_HEADERS = {"authorization", "user-agent", "host", "content-length", "content-type", "accept-encoding"}


class PrometheusSettings(_Section):
    url: str = Field(
        "http://localhost:9090",
        description="Prometheus, Thanos, VictoriaMetrics or Mimir query URL (a user:password in it is taken as "
        "username and password, and never printed)",
    )
    bearer_token: SecretStr | None = Field(None, description="sent as Authorization: Bearer")
    bearer_token_file: Path | None = Field(None, description="read the bearer token from this file")
    username: str | None = Field(None, description="basic auth user")
    password: SecretStr | None = Field(None, description="basic auth password")
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="more HTTP headers sent with every query: a tenant for Mimir or Cortex "
        '(headers = {"X-Scope-OrgID" = "team-a"}) or a proxy\'s; not Authorization or User-Agent '
        "(bearer_token, username and password set those)",
    )
    verify_tls: bool = Field(True, description="check the server's certificate")
    ca_file: Path | None = Field(None, description="CA bundle for the server's certificate")
    timeout: float = Field(30.0, gt=0, description="seconds per query")
    connect_timeout: float = Field(2.0, gt=0, description="seconds to connect (an unreachable server fails this fast)")
    retries: int = Field(
        3,
        ge=0,
        le=10,
        description="retries with backoff (0.5, 1, 2 s... at most 8 s) once the server failed; then the report fails",
    )
    deadline_seconds: float = Field(
        180.0,
        gt=0,
        description="a report's queries, all together, end by then (every connect, and every read of an answer, "
        "headers and body, is capped by it)",
    )
    concurrency: int = Field(4, ge=1, le=32, description="queries in flight at once")
    max_response_bytes: int = Field(
        64 * 2**20,
        ge=2**16,
        description="bytes of one answer (decoded): a query whose answer goes past it fails, before it is all read; "
        "queries in flight together wait for each other to stay within it (parsed, an answer takes about 10 times "
        "its bytes)",
    )
    max_report_memory_bytes: int = Field(
        2 * 2**30,
        ge=64 * 2**20,
        description="the report gives up, with one line, once its process holds more than this while reading "
        "answers (a 1,024-GPU week takes ~300 MiB)",
    )
    naming: Literal["gpuledger", "dcgm"] = Field(
        "gpuledger", description="which exporter's series to read: gpuledger, or dcgm (NVIDIA dcgm-exporter)"
    )
    dcgm_scrape_interval: float = Field(
        15.0,
        gt=0,
        description="dcgm naming: dcgm-exporter's scrape interval (s); each scrape counts this long as sampled",
    )
    dcgm_host_labels: list[str] = Field(
        ["node", "kubernetes_node", "hostname", "Hostname", "instance"],
        min_length=1,
        description="dcgm naming: the host of a GPU is the first of these labels present on its most recent series "
        "(hostname, spelled Hostname before May 2026 (dcgm-exporter #655), is the node where its Helm chart or the "
        "GPU Operator set NODE_NAME, else the exporter pod's name, which is passed over for a later label)",
    )
    dcgm_exporter_containers: list[str] = Field(
        ["nvidia-dcgm-exporter", "exporter", "dcgm-exporter"],
        description="dcgm naming: container names of dcgm-exporter itself (GPU Operator, Helm chart, others): where "
        "no up series names its scrape target's pod, a series carrying one of these is the exporter's own, not a "
        "workload's",
    )
    kube_state_metrics: bool = Field(True, description="read Kubernetes queue wait from kube-state-metrics")
    cluster_label: str = Field(
        "cluster",
        description="the label naming the cluster a GPU reports from (as external labels or relabelling set it, "
        "e.g. in Thanos, Mimir or VictoriaMetrics over several clusters): the report's cluster rows; empty: none",
    )

    @field_validator("cluster_label")
    @classmethod
    def _cluster_label(cls, v: str) -> str:
        if v and not LABEL_NAME.fullmatch(v):
            raise ValueError(f"{v!r} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
        return v

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not HEADER_NAME.fullmatch(name):
                raise ValueError(f"{name[:40]!r} is not an HTTP header name")
            if name.lower() in OWN_HEADERS:
                raise ValueError(f"{name} is gpuledger's own (bearer_token, username and password set Authorization)")
            if not value.isascii() or not all(c.isprintable() for c in value):
                raise ValueError(f"{name}: a value of printable ASCII, without line breaks or control characters")
        return v

    @model_validator(mode="before")
    @classmethod
    def _userinfo(cls, data: Any) -> Any:
        """``http://user:password@host``: the credentials go to username and password (a secret),
        so the URL, in logs and errors, never holds them."""
        if not isinstance(data, dict) or not isinstance(data.get("url"), str):
            return data
        parts = urlsplit(data["url"])
        if "@" not in parts.netloc:
            return data
        if data.get("username") is not None or data.get("password") is not None:
            raise ValueError("credentials both in url and in username/password: set one")
        userinfo, _, host = parts.netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        return {
            **data,
            "url": urlunsplit(parts._replace(netloc=host)),
            "username": unquote(user),
            "password": unquote(password),
        }

    @model_validator(mode="after")
    def _tls(self) -> PrometheusSettings:
        if self.ca_file is not None and not self.verify_tls:
            raise ValueError("ca_file with verify_tls = false: a CA bundle is for checking the certificate; set one")
        return self

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        parts = urlsplit(v)
        if not parts.hostname or any(c.isspace() or not c.isprintable() for c in v):
            raise ValueError("not a URL: no host, or spaces or control characters in it")
        try:
            parts.port  # noqa: B018 (a port out of range raises)
        except ValueError as e:
            raise ValueError(f"bad port: {e}") from None
        return v.rstrip("/")

    @model_validator(mode="after")
    def _auth(self) -> PrometheusSettings:
        if (self.username is None) != (self.password is None):
            raise ValueError("username and password go together")
        if self.bearer_token is not None and self.bearer_token_file is not None:
            raise ValueError("set bearer_token or bearer_token_file, not both")
        if self.bearer_token_file is not None and not self.bearer_token_file.is_file():
            raise ValueError(f"bearer_token_file not found: {self.bearer_token_file}")
        return self


class AnalyticsSettings(_Section):
    source: Literal["prometheus", "dcgm", "embedded"] = Field(
        "embedded",
        description="where the history comes from: embedded (the exporter's SQLite), prometheus (gpuledger's series "
        "in Prometheus or a compatible store), or dcgm (NVIDIA dcgm-exporter's series there; prometheus with "
        "prometheus.naming = dcgm says the same)",
    )
    history: Path | None = Field(
        None,
        description="embedded source: the exporter's SQLite (default: [history] path, else the exporter's default)",
    )
    timezone: str = Field(
        "UTC",
        description="weeks and days of the report start at midnight here; the daemon's cron times, tariff and carbon "
        "windows are in this time zone too",
    )
    reports_dir: Path = Field(
        Path("reports"), description="where reports are written (the analytics daemon serves them at /reports/)"
    )
    formats: list[str] = Field(
        ["html", "json", "csv", "md"], min_length=1, description="report formats: html, json, csv, md"
    )
    cron: str = Field(
        "5 0 * * 1",
        description="when the daemon writes last week's report (crontab, in timezone); a start writes it when it is "
        "missing",
    )
    refresh_minutes: float = Field(
        60.0,
        gt=0,
        description="minutes between refreshes of the rolling 7-day figures (and the budgets); the daemon's /healthz "
        "answers 503 after 3 periods without one",
    )
    listen: str = Field(":10045", description="the analytics daemon's /metrics address")
    min_coverage: float = Field(
        0.99,
        ge=0,
        le=1,
        description="a report whose fleet coverage (sampled / available GPU-hours) is under this is marked incomplete",
    )
    pod_labels: list[str] = Field(
        [],
        description="kube-state-metrics' kube_pod_labels label names (label_<pod label>, e.g. label_team, "
        "label_project; kube-state-metrics exports only those in its --metric-labels-allowlist) that pod rows "
        "carry, read from Prometheus and joined by namespace and pod (a pod's latest in the window); the report "
        "groups by them as label:<name>",
    )
    group_by: list[str] = Field(
        list(groupings.GROUP_BY),
        description="the report's groupings besides host, model, GPU and job: "
        f"{', '.join(groupings.names())}, or label:<name> for one of pod_labels (e.g. label:label_team); each gets "
        "rows (a job without the attribute under (none)), a section and chart in the HTML, and /metrics gauges",
    )
    group_top_n: int = Field(
        20,
        ge=1,
        le=1000,
        description="/metrics: each grouping's top N keys by total cost get gauges; one (other) row sums the rest",
    )

    day_cache: bool = Field(
        True,
        description="prometheus and dcgm sources: the analytics daemon keeps each settled day's GPU and job figures "
        "in <reports_dir>/.days (read once, after a refresh), and every report holding the day (gpuledger report "
        "into the same folder too) takes them from there, not from the store (docs/analytics.md: delete the folder "
        "after a backfill)",
    )
    day_cache_settle_minutes: float = Field(
        120.0,
        ge=0,
        le=10080,
        description="a day is kept only when it ended this long ago: data that reaches the store later (remote write "
        "or federation lag, a scrape's delay) is still counted",
    )
    access: Literal["open", "per_user"] = Field(
        "open",
        description="who sees what the analytics daemon serves: open (everyone who passes [web] basic auth, if any, "
        "sees everything) or per_user (each user, named by basic auth or a trusted proxy's header, sees only their "
        "own users and jobs rows, idle and stalled jobs in the reports and the landing page; admins see everything; "
        "/metrics is the admins'; docs/security.md)",
    )
    admins: list[str] = Field(
        [],
        description="per_user: the users who see everything, /metrics included (Prometheus scrapes as one of them); "
        "at least one; without proxy_user_header each must be a [web] basic-auth user (basic_auth_users or its file)",
    )
    per_user_fleet_totals: bool = Field(
        False,
        description="per_user: a user's report keeps the fleet's totals and breakdowns by host, model, GPU, cluster, "
        "day, queue and failures, and the unallocated row (no user's name, job or cost in them); false: the headline "
        "is the user's own and those are left out",
    )
    proxy_user_header: str = Field(
        "",
        description="per_user: the request header in which a trusted reverse proxy names the user it authenticated "
        '(e.g. "X-Forwarded-User"); the header from an address outside trusted_proxies is refused with 403; '
        "empty: only basic auth",
    )
    trusted_proxies: list[str] = Field(
        [],
        description="per_user: the addresses or networks (CIDR) of the reverse proxies whose proxy_user_header "
        'is believed, e.g. ["10.0.0.0/8"]',
    )

    @field_validator("admins")
    @classmethod
    def _admins(cls, v: list[str]) -> list[str]:
        bad = [x for x in v if not valid_user(x)]
        if bad:
            raise ValueError(f"{bad!r}: a user name is 1-256 printable characters without surrounding spaces")
        return list(dict.fromkeys(v))

    @field_validator("proxy_user_header")
    @classmethod
    def _proxy_header(cls, v: str) -> str:
        if v and not HEADER_NAME.fullmatch(v):
            raise ValueError(f"{v[:80]!r} is not an HTTP header name (letters, digits, -; at most 64)")
        if v.lower() in ("authorization", "host", "cookie"):
            raise ValueError(f"{v!r} carries something else than a proxy's user")
        return v

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies(cls, v: list[str]) -> list[str]:
        out = []
        for x in v:
            try:
                out.append(str(ipaddress.ip_network(x, strict=False)))
            except ValueError:
                raise ValueError(f"{x[:80]!r} is not an address or a network (10.0.0.0/8, ::1)") from None
        return list(dict.fromkeys(out))

    @model_validator(mode="after")
    def _access(self) -> AnalyticsSettings:
        if bool(self.proxy_user_header) != bool(self.trusted_proxies):
            raise ValueError("analytics.proxy_user_header and analytics.trusted_proxies go together: set both")
        if self.access == "open":
            given = [n for n in ("admins", "proxy_user_header", "per_user_fleet_totals") if getattr(self, n)]
            if given:
                raise ValueError(f'analytics.{given[0]} is for access = "per_user"; access is "open"')
        elif not self.admins:
            raise ValueError(
                'analytics.admins: access = "per_user" needs at least one admin (who sees everything and /metrics)'
            )
        return self

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        return check_timezone(v)

    @field_validator("formats")
    @classmethod
    def _formats(cls, v: list[str]) -> list[str]:
        bad = [f for f in v if f not in FORMATS]
        if bad:
            raise ValueError(f"unknown format(s) {bad}; choose from {list(FORMATS)}")
        return v

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str) -> str:
        return crontab.check(v)

    @field_validator("pod_labels")
    @classmethod
    def _pod_labels(cls, v: list[str]) -> list[str]:
        bad = [x for x in v if not x.startswith("label_") or x == "label_" or not LABEL_NAME.fullmatch(x)]
        if bad:
            raise ValueError(f"{bad}: kube_pod_labels names a pod label label_<name> (e.g. label_team)")
        return list(dict.fromkeys(v))

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        split_listen(v)
        return v

    @field_validator("group_by")
    @classmethod
    def _group_by(cls, v: list[str], info: ValidationInfo) -> list[str]:
        read = {g.name for g in groupings.for_pod_labels(info.data.get("pod_labels", []))}
        for g in v:
            groupings.check(g)
            if g.startswith(LABEL) and g not in read:
                name = g.removeprefix(LABEL)
                raise ValueError(f"{g!r} groups by a pod label not read: add {name!r} to [analytics] pod_labels")
        return list(dict.fromkeys(v))


class StatementsSettings(_Section):
    enabled: bool = Field(
        False, description="the analytics daemon writes last month's statements at cron (by default on the 1st)"
    )
    by: list[Annotated[str, AfterValidator(_statement_grouping)]] = Field(
        ["user", "account"], description="one statement per key of each of these groupings (user, account, namespace)"
    )
    formats: list[Literal["html", "md", "csv"]] = Field(
        ["html", "md", "csv"], min_length=1, description="statement formats: html, md, csv"
    )
    dir: Path = Field(
        Path("statements"),
        description="where statements are written (statement-<grouping>-<key>-<YYYY-MM>.<ext>; not served)",
    )
    cron: str = Field("30 0 1 * *", description="when the daemon writes last month's statements (crontab)")

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str) -> str:
        return crontab.check(v)


class FocusSettings(_Section):
    enabled: bool = Field(
        False,
        description="the analytics daemon writes yesterday's FOCUS 1.0 CSV (gpuledger report --focus's rows) "
        "each day: daily files, as cloud providers deliver FOCUS data, each one finished local day, final once "
        "written (never rewritten: an import that loads each new file once neither misses nor double counts a "
        "cost), with BillingPeriod the calendar month (the invoice period) and ChargePeriod the day",
    )
    dir: Path = Field(
        Path("focus"),
        description="where the files are written: <grouping>/<grouping>-<YYYY-MM-DD>.csv, a folder per grouping "
        "(import one folder: each sums to the fleet, two would count it twice); not served",
    )
    cron: str = Field(
        "15 0 * * *",
        description="when the daemon writes yesterday's files (crontab, in [analytics] timezone; daily: a run "
        "writes only yesterday, and a start writes it when it is missing)",
    )

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str) -> str:
        return crontab.check(v)


class BudgetRule(_Section):
    group: str = Field(description=f"the grouping: {_BUDGETED}, or label:<name> for one of pod_labels")
    key: str = Field(
        min_length=1,
        max_length=MAX_LABEL_VALUE,
        description="the group's key in the report (a user, an account, a cluster...; "
        f"at most {MAX_LABEL_VALUE} printable characters: the gauges' key label)",
    )
    currency: float | None = Field(
        None, gt=0, description="the month's budget in the cost model's currency (the rows' total cost)"
    )
    gpu_hours: float | None = Field(None, gt=0, description="the month's budget in charged GPU-hours")

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        return check_label_value(v)

    @field_validator("group")
    @classmethod
    def _group(cls, v: str) -> str:
        groupings.check(v, lambda x: x.budgets)
        return v

    @model_validator(mode="after")
    def _one_amount(self) -> BudgetRule:
        if (self.currency is None) == (self.gpu_hours is None):
            raise ValueError(f"budget {self.group}={self.key}: set one of currency or gpu_hours")
        return self


class BudgetsSettings(_Section):
    rules: list[BudgetRule] = Field(
        [],
        description="monthly budgets, each a group (a grouping: "
        f"{_BUDGETED} or label:<name>), a key of it and one amount, currency (total cost) or "
        'gpu_hours (charged GPU-hours), e.g. {group = "account", key = "physics", currency = 5000}; the analytics '
        "daemon exports the calendar month's spent so far, the budget and a linear month-end forecast "
        "(gpuledger_budget_*) at each refresh",
    )

    @field_validator("rules")
    @classmethod
    def _unique(cls, v: list[BudgetRule]) -> list[BudgetRule]:
        seen: set[tuple[str, str, bool]] = set()
        for r in v:
            ident = (r.group, r.key, r.currency is not None)
            if ident in seen:
                raise ValueError(f"budget {r.group}={r.key} given twice in the same unit")
            seen.add(ident)
        return v


class FullSettings(Settings):
    """Everything: the exporter's sections and the analytics', typed."""

    analytics: AnalyticsSettings = Field(default_factory=AnalyticsSettings)  # type: ignore[assignment]
    prometheus: PrometheusSettings = Field(default_factory=PrometheusSettings)  # type: ignore[assignment]
    cost: CostModel = Field(default_factory=CostModel)  # type: ignore[assignment]
    statements: StatementsSettings = Field(default_factory=StatementsSettings)  # type: ignore[assignment]
    budgets: BudgetsSettings = Field(default_factory=BudgetsSettings)  # type: ignore[assignment]
    focus: FocusSettings = Field(default_factory=FocusSettings)  # type: ignore[assignment]

    @model_validator(mode="after")
    def _users(self) -> FullSettings:
        a, users = self.analytics, self.web.basic_auth_users
        if a.access != "per_user" or a.proxy_user_header:
            return self
        if not users:
            raise ValueError(
                'analytics.access = "per_user" needs users: web.basic_auth_users, or analytics.proxy_user_header'
            )
        unknown = [x for x in a.admins if x not in users]
        if unknown:
            raise ValueError(f"analytics.admins: {unknown!r} not in web.basic_auth_users (and no proxy_user_header)")
        return self

    @model_validator(mode="after")
    def _budget_labels(self) -> FullSettings:
        read = {g.name for g in groupings.for_pod_labels(self.analytics.pod_labels)}
        for r in self.budgets.rules:
            name = r.group.removeprefix(LABEL)
            if r.group.startswith(LABEL) and r.group not in read:
                raise ValueError(f"budget {r.group}={r.key}: add {name!r} to [analytics] pod_labels")
        return self


def overrides_from(pairs: dict[str, Any]) -> dict[str, Any]:
    """{'analytics.source': 'x', ...} -> nested dicts, leaving out None values."""
    out: dict[str, Any] = {}
    for dotted, value in pairs.items():
        if value is None:
            continue
        node = out
        *path, last = dotted.split(".")
        for key in path:
            node = node.setdefault(key, {})
        node[last] = value
    return out
