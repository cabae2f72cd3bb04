"""Generate docs/configuration.md from the settings model:
``python -m gpuledger.configdoc > docs/configuration.md`` (a test fails when the file is stale)."""

from __future__ import annotations

import sys

from pydantic import BaseModel

from analytics.cli import COMMON
from analytics.config import FullSettings
from analytics.cost import CarbonRule, CarbonWindow, PriceRule, TariffWindow
from exporter.cli import FLAGS
from exporter.config import DEFAULT_PORT, ENV_PREFIX

INTRO = f"""# Configuration

Every setting can come from four places; a later one wins:
**defaults** < **config file** (`--config FILE` or `GPULEDGER_CONFIG`; TOML, or YAML by its
`.yaml`/`.yml` suffix) < **environment** (`{ENV_PREFIX}SECTION__KEY`) < **command-line flags**.
An invalid value stops any `gpuledger` command with exit code 2 and a message naming the field, e.g.

```
gpuledger exporter: invalid configuration:
  exporter.sample_interval: Input should be greater than or equal to 0.05 (got '0'); set by ...
```

## Example (`examples/gpuledger.toml`)

```toml
[exporter]
reader = "nvml"            # auto | nvml | replay | replay:/path/capture.jsonl
sample_interval = 1.0

[web]
listen = ":{DEFAULT_PORT}"
# tls_cert_file = "/etc/gpuledger/tls.crt"
# tls_key_file = "/etc/gpuledger/tls.key"
# basic_auth_users = {{ prometheus = "$2b$12$..." }}   # bcrypt hashes only

[history]
path = "/var/lib/gpuledger/history.db"
retention_days = 400

[analytics]                # gpuledger analytics / report / up
source = "prometheus"      # or "embedded" (the history above)
timezone = "Europe/Berlin"
reports_dir = "/var/lib/gpuledger/reports"

[prometheus]
url = "http://prometheus:9090"

[cost]                     # see docs/cost-model.md
currency = "EUR"
energy_price_per_kwh = 0.22
pue = 1.35

[[cost.rules]]
match_model = "H200"
purchase_price = 32000
residual_value = 6000
depreciation_years = 4
yearly_operations = 1200
yearly_infrastructure = 900
cloud_reference_per_gpu_hour = 3.2
```

## Port

The default port is **{DEFAULT_PORT}**. Prometheus' list of default port allocations has no free
number left in 9100-9999; {DEFAULT_PORT} lies outside that range and in none of the allocations we
found in public copies of the list (2026-11); it is not a Kubernetes port (10250-10259) either.
The full wiki page could not be read from here, so check it before you register the number. Change
it with `--listen HOST:PORT` (`:PORT` listens on every address, IPv6 and IPv4).

## Readers

- `auto` (default): NVML when the NVIDIA library is installed; on a machine without it, the bundled
  H200 capture is replayed and `gpuledger_exporter_info{{reader="replay"}}` says so. A machine
  whose library exists but whose driver fails stays on NVML with `gpuledger_nvml_up 0`.
  Deployments on GPU nodes should say `nvml` so a broken driver mount can never fall back to a demo.
- `nvml`: real GPUs.
- `replay` / `replay:PATH`: a recorded capture (format: `exporter/captures/README.md`), with the
  `[replay]` settings below. The embedded history stays off for replays unless a path is given,
  so demo data never lands in a real history file.

## TLS and basic auth

`tls_cert_file` + `tls_key_file` (PEM) switch the endpoint to HTTPS (TLS 1.2+). `basic_auth_users`
maps user names to **bcrypt hashes** (plain passwords are refused), as in Prometheus'
exporter-toolkit web config; make one with
`python -c 'import bcrypt,getpass; print(bcrypt.hashpw(getpass.getpass().encode(), bcrypt.gensalt()).decode())'`.
Both daemons use them. `/healthz`, `/readyz` and `/livez` need no credentials (probes); `/`, `/metrics`
and the analytics daemon's `/reports/` do.

## History durability

The history is SQLite in WAL mode with `synchronous=NORMAL`, one transaction per minute: a killed
process loses at most the minute in memory and never corrupts the file; a power cut can also lose
the last committed minutes, never the file. Rows that fail to write (disk full) are kept in memory
(up to 200,000) and retried at the next minute; `gpuledger_history_write_errors_total` counts it.

## Reference
"""


def _default(field: object) -> str:
    f = field  # pydantic FieldInfo
    factory = getattr(f, "default_factory", None)
    if factory is not None:
        if "hostname" in getattr(factory, "__name__", ""):
            return "(this host's name)"
        made = factory()
        return f"`{made}`" if made else "none"
    if getattr(f, "is_required", lambda: False)():
        return "required"
    value = getattr(f, "default", None)
    if value is None:
        return "—"
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def _fields(out: list[str], section: str, model: type[BaseModel], flags: dict[str, str], env: bool = True) -> None:
    out.append("| key | default | env | flag | meaning |\n|---|---|---|---|---|\n")
    for name, f in model.model_fields.items():
        key = f"{section}.{name}"
        if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel):
            continue
        shown_env = f"`{ENV_PREFIX}{section.upper()}__{name.upper()}`" if env else "—"
        flag = f"`{flags[key]}`" if key in flags else "—"
        out.append(f"| `{name}` | {_default(f)} | {shown_env} | {flag} | {f.description or ''} |\n")


def render() -> str:
    flags = {".".join(path): "--" + dest.replace("_", "-") for dest, path in FLAGS.items()}
    flags["history.enabled"] = "--no-history"
    for dest, dotted in COMMON.items():
        flags.setdefault(dotted, "--" + dest.replace("_", "-"))
    flags["analytics.reports_dir"] = "--reports-dir, --out"
    flags["analytics.formats"] = "--format"
    flags["analytics.listen"] = "--listen (gpuledger up: --analytics-listen)"
    out = [INTRO]
    for section, field in FullSettings.model_fields.items():
        model = field.annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            env = f"{ENV_PREFIX}{section.upper()}"
            out.append(
                f"\n### top level\n\n| key | default | env | flag | meaning |\n|---|---|---|---|---|\n"
                f"| `{section}` | {_default(field)} | `{env}` | `{flags.get(section, '—')}` | "
                "debug, info, warning or error |\n"
            )
            continue
        out.append(f"\n### [{section}]\n\n")
        _fields(out, section, model, flags)
    out.append(
        "\n### [[cost.rules]] and [cost.default]\n\nA price rule; the first rule whose `match_*` fit a GPU "
        "applies, else `[cost.default]`. Lists are easiest in the config file (the environment takes JSON).\n\n"
    )
    _fields(out, "cost.rules", PriceRule, flags, env=False)
    out.append(
        "\n### [[cost.tariff]]\n\nTime-of-day energy prices (local time of the report); hours no window "
        "covers pay `energy_price_per_kwh`.\n\n"
    )
    _fields(out, "cost.tariff", TariffWindow, flags, env=False)
    out.append(
        "\n### [[cost.carbon_windows]] and [[cost.carbon_rules]]\n\nGrid carbon intensity for emissions "
        "(energy × PUE × intensity, see [cost-model.md](cost-model.md#carbon)): `carbon_windows` by time of day "
        "(local time of the report) over `grid_intensity_g_per_kwh`, which the hours no window covers take; "
        "`carbon_rules` per host glob, the first match wins over the site's values. With no intensity at all "
        "the reports show no emissions (a dash, never 0).\n\nA carbon window:\n\n"
    )
    _fields(out, "cost.carbon_windows", CarbonWindow, flags, env=False)
    out.append("\nA carbon rule (its own `carbon_windows` are carbon windows as above):\n\n")
    _fields(out, "cost.carbon_rules", CarbonRule, flags, env=False)
    return "".join(out)


if __name__ == "__main__":
    sys.stdout.write(render())
