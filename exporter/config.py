"""The exporter's settings: defaults < config file (TOML or YAML) < environment (GPULEDGER_…) < CLI flags.

Sections mirror the file layout (``[exporter]``, ``[web]``, ``[history]``, ``[replay]``);
environment variables use ``__`` between section and key: ``GPULEDGER_WEB__LISTEN=:10044``.
Loading every layer, and the ``ConfigError`` that names a bad field, is ``daemonkit.settings``.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_settings import SettingsConfigDict

from daemonkit import crontab
from daemonkit.auth import check_password_hash
from daemonkit.settings import LayeredSettings, check_timezone, load_settings, split_listen
from exporter.readers.mig_profiles import parse_layout

DEFAULT_PORT = 10044
"""Prometheus' default-port list has no free number left in 9100-9999; 10044 is outside that
range and in none of the allocations we found in public copies of the list (2026-11), and it is
not a Kubernetes port (10250-10259). Change it with --listen."""

ENV_PREFIX = "GPULEDGER_"
MAX_LABEL_VALUE = 253
"""Longest setting that becomes a label value: a DNS name's limit (RFC 1035), far below what
makes every series of the node a burden to Prometheus."""


def check_label_value(v: str) -> str:
    """A settings validator for a string exported as a label value: printable, no control characters."""
    if not v.isprintable():
        raise ValueError("must be printable: no control characters, tabs or newlines")
    return v


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class ExporterSettings(_Section):
    reader: str = Field("auto", description="auto, nvml, replay or replay:PATH (see Readers)")
    sample_interval: float = Field(1.0, ge=0.05, le=60, description="seconds between fast samples")
    energy_interval: float = Field(
        10.0,
        ge=0,
        le=3600,
        description="seconds between energy-counter reads; 0 = every slow-lane round "
        "(1 s, or sample_interval if shorter)",
    )
    health_interval: float = Field(
        30.0,
        ge=0,
        le=3600,
        description="seconds between ECC / row-remap / power-limit reads; 0 = every slow-lane round "
        "(1 s, or sample_interval if shorter)",
    )
    pcie_interval: float = Field(30.0, ge=0, le=3600, description="seconds between PCIe throughput reads; 0 = off")
    allocated_idle_below: float = Field(
        0.05,
        ge=0,
        le=1,
        description="utilisation under which a GPU holding a compute process counts as allocated but idle",
    )
    stalled_util_above: float = Field(
        0.90, ge=0, le=1, description="stalled: utilisation at or over this (a kernel resident nearly all the time)"
    )
    stalled_sm_below: float = Field(
        0.25,
        ge=0,
        le=1,
        description="stalled: GPM SM activity under this (a hung NCCL collective spins on up to 32 of 132 SMs, 24 %)",
    )
    stalled_tensor_below: float = Field(0.05, ge=0, le=1, description="stalled: tensor-core activity under this")
    stalled_dram_below: float = Field(0.05, ge=0, le=1, description="stalled: DRAM bandwidth use under this")
    stalled_min_seconds: float = Field(
        300.0,
        ge=0,
        le=86400,
        description="a stall counts once it has lasted this long without a break, then from its start",
    )
    hostname: str = Field(
        default_factory=socket.gethostname,
        min_length=1,
        max_length=MAX_LABEL_VALUE,
        description="hostname label of gpuledger_gpu_info and the host of the history's rows "
        f"(at most {MAX_LABEL_VALUE} printable characters)",
    )
    stale_after: float = Field(
        10.0,
        gt=0,
        description="/healthz and /readyz answer 503 when the last sampling round ended longer ago than this (s; "
        "must exceed sample_interval; when not set: 10, or 3 x sample_interval if that is longer)",
    )
    lost_gpu_retry: float = Field(10.0, gt=0, description="seconds between attempts to bring a lost GPU back")
    nvml_retry_max: float = Field(60.0, ge=1, description="longest wait between NVML re-initialisation attempts (s)")

    @field_validator("reader")
    @classmethod
    def _reader(cls, v: str) -> str:
        v = v.strip()
        if v in ("auto", "nvml", "replay"):
            return v
        if v.startswith("replay:"):
            path = Path(v.removeprefix("replay:")).expanduser()
            if not path.is_file():
                raise ValueError(f"capture file not found: {path}")
            return f"replay:{path}"
        raise ValueError("expected auto, nvml, replay or replay:PATH")

    @field_validator("hostname")
    @classmethod
    def _hostname(cls, v: str) -> str:
        return check_label_value(v)

    @model_validator(mode="after")
    def _stale_after_a_round(self) -> ExporterSettings:
        """A round is up to sample_interval old between rounds: readiness that expects one sooner
        flaps. Not set: long enough for the interval; set too short: refused, naming it."""
        if "stale_after" not in self.model_fields_set:
            self.__dict__["stale_after"] = max(10.0, 3 * self.sample_interval)  # no re-validation
        elif self.stale_after <= self.sample_interval:
            raise ValueError(
                f"stale_after ({self.stale_after:g} s) must exceed sample_interval ({self.sample_interval:g} s): "
                "between rounds the last one is up to an interval old"
            )
        return self


MAX_USERS_FILE_BYTES = 1 << 20


def read_htpasswd(path: Path) -> dict[str, str]:
    """user -> bcrypt hash from an htpasswd file, or a ValueError naming the file (and the line)."""
    where = f"web.basic_auth_users_file {path}"
    if not path.is_file():
        raise ValueError(f"{where}: not a regular file")
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_USERS_FILE_BYTES + 1)
        text = raw.decode("utf-8")
    except OSError as e:
        raise ValueError(f"{where}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{where}: not UTF-8") from None
    if len(raw) > MAX_USERS_FILE_BYTES:
        raise ValueError(f"{where}: over {MAX_USERS_FILE_BYTES} bytes")
    users: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, hashed = line.partition(":")
        if not sep or not user or not user.isprintable() or user != user.strip():
            raise ValueError(f"{where}:{n}: not a user:hash line")
        if user in users:
            raise ValueError(f"{where}:{n}: user {user[:80]!r} given twice")
        try:
            users[user] = check_password_hash(hashed)
        except ValueError as e:
            raise ValueError(f"{where}:{n}: user {user[:80]!r}: password hash {e}") from None
    return users


class WebSettings(_Section):
    listen: str = Field(f":{DEFAULT_PORT}", description="the exporter's HOST:PORT (or :PORT for every address)")
    tls_cert_file: Path | None = Field(
        None, description="PEM certificate; with tls_key_file, HTTPS on both daemons (exporter and analytics)"
    )
    tls_key_file: Path | None = Field(None, description="PEM private key")
    basic_auth_users: dict[str, str] = Field(
        default_factory=dict, description="user -> bcrypt hash, on both daemons (the probes need none)"
    )
    basic_auth_users_file: Path | None = Field(
        None,
        description="more users, from an htpasswd file of bcrypt hashes (a user:$2y$... line each, as htpasswd -B "
        "writes it; # comments), added to basic_auth_users at start",
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        split_listen(v)
        return v

    @field_validator("tls_cert_file", "tls_key_file")
    @classmethod
    def _exists(cls, v: Path | None) -> Path | None:
        if v is not None and not v.is_file():
            raise ValueError(f"file not found: {v}")
        return v

    @field_validator("basic_auth_users")
    @classmethod
    def _hashes(cls, v: dict[str, str]) -> dict[str, str]:
        """Each user's hash checked (daemonkit.http.check_password_hash); an error is located at
        ``web.basic_auth_users.USER`` and never echoes the value (it may be a plain password)."""
        errors: list[InitErrorDetails] = []
        for user, hashed in v.items():
            if not user or ":" in user:
                msg = f"user name {user!r} must be non-empty and contain no ':'"
            else:
                try:
                    check_password_hash(hashed)
                    continue
                except ValueError as e:
                    msg = f"password hash {e}"
            errors.append(InitErrorDetails(type=PydanticCustomError("password_hash", msg), loc=(user,), input={}))
        if errors:
            raise ValidationError.from_exception_data("basic_auth_users", errors)
        return v

    @model_validator(mode="after")
    def _users_file(self) -> WebSettings:
        """The users of ``basic_auth_users_file`` added to ``basic_auth_users`` (each hash checked as
        theirs are; an error names the file and line, never the hash)."""
        if self.basic_auth_users_file is not None:
            users = read_htpasswd(self.basic_auth_users_file)
            both = sorted(users.keys() & self.basic_auth_users.keys())
            if both:
                raise ValueError(f"web.basic_auth_users_file: {both[0]!r} is in basic_auth_users too: give it once")
            self.__dict__["basic_auth_users"] = {**self.basic_auth_users, **users}  # no re-validation
        return self

    @model_validator(mode="after")
    def _pair(self) -> WebSettings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together: set both or neither")
        return self


class HistorySettings(_Section):
    enabled: bool = Field(True, description="write per-minute rollups to SQLite")
    path: Path | None = Field(
        None,
        description="SQLite file; default history.db in $STATE_DIRECTORY, else /var/lib/gpuledger (as root), else "
        "$XDG_STATE_HOME/gpuledger or ~/.local/state/gpuledger; a replay writes none unless it is set",
    )
    retention_days: int = Field(
        400, ge=1, le=36500, description="rows older than this many days are deleted (checked hourly)"
    )


class ReplaySettings(_Section):
    gpus: int = Field(1, ge=1, le=256, description="present the captured GPU as this many GPUs")
    speed: float = Field(1.0, gt=0, le=1000, description="capture seconds per wall second")
    loop: bool = Field(True, description="start over at the end of the capture")
    stagger: bool = Field(True, description="spread the GPUs over the capture's phases")
    mig: str | None = Field(
        None,
        description="synthetic MIG: present every replayed GPU in MIG mode with this layout, as mig-parted names "
        "it (all-1g.10gb, all-3g.40gb, ... or one GPU's profiles, 3g.40gb,2g.20gb,2g.20gb; an H100 80GB's or an "
        "H200 141GB's); the capture holds no MIG instance, each instance replays it at its own position",
    )

    @field_validator("mig")
    @classmethod
    def _mig(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None
        try:
            parse_layout(v)
        except ValueError as e:
            raise ValueError(f"--replay-mig: {e}") from None
        return v.strip()


class BenchSettings(_Section):
    enabled: bool | None = Field(
        None, description="run benchmark rounds; default: with the nvml reader when torch is installed"
    )
    cron: str = Field("0 4 * * *", description="when to run (crontab: minute hour day month weekday)")
    interval: float | None = Field(None, gt=0, description="seconds between rounds; replaces cron when set")
    timezone: str | None = Field(None, description="time zone of the cron expression (default: the host's)")
    run_at_start: bool = Field(
        False,
        description="also run one round idle_window + 1 s after start (skipped, like any round, if the GPUs are "
        "not idle then)",
    )
    idle_window: float = Field(
        600.0,
        ge=0,
        description="seconds every GPU must have been watched and idle before a round; else the round is skipped "
        "(skipped_busy)",
    )
    idle_below: float = Field(
        0.05, ge=0, le=1, description="utilisation under which a GPU with no compute process counts as idle"
    )
    timeout: float = Field(600.0, gt=0, description="seconds after which a round is killed")
    benches: list[str] = Field(
        ["allreduce", "train", "matmul", "memcpy"], min_length=1, description="which benchmarks a round runs"
    )
    quick: bool = Field(False, description="smaller sizes and fewer steps")

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str) -> str:
        return crontab.check(v)

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str | None) -> str | None:
        return None if v is None else check_timezone(v)

    @field_validator("benches")
    @classmethod
    def _benches(cls, v: list[str]) -> list[str]:
        known = ("allreduce", "train", "matmul", "memcpy")
        bad = [b for b in v if b not in known]
        if bad:
            raise ValueError(f"unknown benchmark(s) {bad}; choose from {list(known)}")
        return v


class AttributionSettings(_Section):
    proc_root: Path = Field(Path("/proc"), description="where to read processes (the host's /proc in a container)")
    passwd_file: Path | None = Field(None, description="user names from this passwd file (default: the system's)")
    kubelet_socket: str = Field(
        "auto",
        description="pod-resources socket; auto: /var/lib/kubelet/pod-resources/kubelet.sock if present; '' = off",
    )
    pods_interval: float = Field(30.0, gt=0, description="seconds between pod-resources queries")
    job_grace: float = Field(600.0, ge=0, description="seconds a job's series stay after it left its GPU")

    @field_validator("proc_root")
    @classmethod
    def _dir(cls, v: Path) -> Path:
        if not v.is_dir():
            raise ValueError(f"not a directory: {v}")
        return v

    @field_validator("passwd_file")
    @classmethod
    def _file(cls, v: Path | None) -> Path | None:
        if v is not None and not v.is_file():
            raise ValueError(f"file not found: {v}")
        return v


class SlurmSettings(_Section):
    enabled: bool = Field(False, description="watch the Slurm queue from this node (one node per cluster)")
    interval: float = Field(15.0, ge=1, description="seconds between polls")
    command_timeout: float = Field(10.0, gt=0, description="seconds a Slurm command may take")
    conf: Path | None = Field(None, description="slurm.conf for the commands (SLURM_CONF)")
    squeue: str = Field("squeue", min_length=1, description="squeue command")
    sacct: str = Field("sacct", min_length=1, description="sacct command")
    scontrol: str = Field("scontrol", min_length=1, description="scontrol command")
    accounting: Literal["auto", "sacct", "jobcomp"] = Field(
        "auto",
        description="where finished jobs come from: sacct (slurmdbd), jobcomp (a jobcomp/filetxt file), or auto: sacct "
        "where it answers, else the jobcomp file",
    )
    jobcomp_file: Path | None = Field(
        None,
        description="jobcomp/filetxt file (default with accounting = auto: JobCompLoc of scontrol show config; "
        "accounting = jobcomp needs it set)",
    )
    finished_info_seconds: float = Field(
        600.0,
        gt=0,
        description="seconds gpuledger_slurm_job_info keeps a job after its finished record was read (or squeue last "
        "listed it started), so that Prometheus scrapes it after the end",
    )
    idle_action: Literal["off", "warn", "cancel"] = Field(
        "off",
        description="on each GPU node: a Slurm job whose GPUs here all stay idle is told so (warn: scontrol notify) "
        "or, after idle_cancel_after, also cancelled (cancel: scancel, only one-node jobs in idle_cancel_partitions)",
    )
    idle_warn_after: float = Field(3600.0, gt=0, description="seconds of idle GPUs before the job is notified")
    idle_cancel_after: float = Field(
        7200.0, gt=0, description="seconds of idle GPUs before the job is cancelled (at least idle_warn_after)"
    )
    idle_cancel_partitions: list[str] = Field(
        default_factory=list,
        description="the partitions whose idle jobs may be cancelled, as the scheduler lists them (empty: none)",
    )
    scancel: str = Field("scancel", min_length=1, description="scancel command")

    @model_validator(mode="after")
    def _cancel_after_the_warning(self) -> SlurmSettings:
        if self.idle_cancel_after < self.idle_warn_after:
            raise ValueError(
                f"idle_cancel_after ({self.idle_cancel_after:g} s) must be at least idle_warn_after "
                f"({self.idle_warn_after:g} s): a job is warned before it is cancelled"
            )
        if self.idle_action == "cancel" and not self.idle_cancel_partitions:
            raise ValueError('idle_action = "cancel" needs idle_cancel_partitions: the partitions it may cancel in')
        return self


class Settings(LayeredSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX)

    log_level: Literal["debug", "info", "warning", "error"] = "info"
    exporter: ExporterSettings = Field(default_factory=ExporterSettings)
    web: WebSettings = Field(default_factory=WebSettings)
    history: HistorySettings = Field(default_factory=HistorySettings)
    replay: ReplaySettings = Field(default_factory=ReplaySettings)
    bench: BenchSettings = Field(default_factory=BenchSettings)
    attribution: AttributionSettings = Field(default_factory=AttributionSettings)
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    # The analytics' sections, typed by the analytics (analytics.config.FullSettings), which may
    # import the exporter while the exporter never imports the analytics: one file serves both
    # daemons. `gpuledger exporter` loads FullSettings, so every command checks the whole file.
    analytics: dict[str, Any] = Field(default_factory=dict)
    prometheus: dict[str, Any] = Field(default_factory=dict)
    cost: dict[str, Any] = Field(default_factory=dict)
    statements: dict[str, Any] = Field(default_factory=dict)
    budgets: dict[str, Any] = Field(default_factory=dict)
    focus: dict[str, Any] = Field(default_factory=dict)


def load(config_file: str | Path | None = None, overrides: dict[str, Any] | None = None) -> Settings:
    """The exporter's settings from every layer; ``overrides`` are CLI values as nested dicts."""
    return load_settings(Settings, config_file, overrides)


def default_history_path() -> Path:
    state = os.environ.get("STATE_DIRECTORY")  # systemd's StateDirectory=
    if state:
        return Path(state.split(":")[0]) / "history.db"
    if os.geteuid() == 0:
        return Path("/var/lib/gpuledger/history.db")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpuledger" / "history.db"
