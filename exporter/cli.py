"""``gpuledger exporter`` (also ``python -m exporter``): flags on top of file and environment."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from daemonkit.argparse_hints import HintingParser, describe
from daemonkit.logs import setup_logging
from daemonkit.settings import ConfigError, load_settings
from exporter.config import DEFAULT_PORT, Settings

DESCRIPTION = "Run the node exporter: sample the GPUs and serve their use, energy and jobs on /metrics."
EXAMPLES = (  # arguments only: ``gpuledger exporter`` and ``python -m exporter`` take the same
    f"--listen :{DEFAULT_PORT} --reader nvml",
    "--config /etc/gpuledger/gpuledger.toml --check-config",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="TOML or YAML config file (env GPULEDGER_CONFIG)")
    p.add_argument("--listen", metavar="HOST:PORT", help=f"address to serve on (default :{DEFAULT_PORT})")
    p.add_argument("--reader", metavar="SPEC", help="auto (default) | nvml | replay | replay:CAPTURE.jsonl")
    p.add_argument("--sample-interval", metavar="SECONDS", help="seconds between samples (default 1)")
    p.add_argument("--hostname", help="hostname label (default: this host's name)")
    p.add_argument("--history", metavar="PATH", help="SQLite history file")
    p.add_argument("--no-history", action="store_true", help="do not write the embedded history")
    p.add_argument("--replay-gpus", metavar="N", help="replay: present the capture as N GPUs")
    p.add_argument(
        "--replay-mig",
        metavar="LAYOUT",
        help="replay: present each GPU in MIG mode, synthetic (all-1g.10gb, or profiles 3g.40gb,2g.20gb,2g.20gb)",
    )
    p.add_argument("--replay-speed", metavar="X", help="replay: capture seconds per wall second")
    p.add_argument("--tls-cert", metavar="FILE", help="PEM certificate (HTTPS)")
    p.add_argument("--tls-key", metavar="FILE", help="PEM private key (HTTPS)")
    p.add_argument("--log-level", help="debug | info | warning | error")


def add_check_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--check-config",
        action="store_true",
        help="validate the configuration (file, environment, flags), then exit: 0 valid, 2 invalid",
    )


FLAGS: dict[str, tuple[str, ...]] = {
    "listen": ("web", "listen"),
    "reader": ("exporter", "reader"),
    "sample_interval": ("exporter", "sample_interval"),
    "hostname": ("exporter", "hostname"),
    "history": ("history", "path"),
    "replay_gpus": ("replay", "gpus"),
    "replay_mig": ("replay", "mig"),
    "replay_speed": ("replay", "speed"),
    "tls_cert": ("web", "tls_cert_file"),
    "tls_key": ("web", "tls_key_file"),
    "log_level": ("log_level",),
}


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """CLI flags as the nested dict the settings take (flags left out are absent)."""
    out: dict[str, Any] = {}
    for dest, path in FLAGS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    if getattr(args, "no_history", False):
        out.setdefault("history", {})["enabled"] = False
    return out


def run(args: argparse.Namespace, settings_cls: type[Settings] = Settings) -> int:
    """Load the settings as ``settings_cls`` (``gpuledger exporter`` passes the model of every
    section, so a mistake in the analytics' sections stops it too), then run the exporter."""
    from exporter import app

    try:
        settings = load_settings(settings_cls, args.config, overrides(args))
        if getattr(args, "check_config", False):
            print("gpuledger exporter: configuration ok")
            return 0
        setup_logging(settings.log_level)
        return app.run(settings)
    except ConfigError as e:
        print(f"gpuledger exporter: {e}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    p = HintingParser(prog="python -m exporter")
    add_arguments(p)
    add_check_argument(p)
    describe(p, DESCRIPTION, *(f"python -m exporter {e}" for e in EXAMPLES))
    return run(p.parse_args(argv))
