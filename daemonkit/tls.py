"""The HTTPS context of the daemons' server, with errors that name the setting at fault."""

from __future__ import annotations

import ssl

from daemonkit.settings import ConfigError


def tls_context(cert_file: str, key_file: str | None) -> ssl.SSLContext:
    """A server context for the pair, or a ConfigError naming ``web.tls_cert_file`` or
    ``web.tls_key_file``: unreadable, not PEM, encrypted (no prompt: a daemon has no TTY), or a
    key that does not match the certificate."""
    key_file = key_file or cert_file
    for name, path in (("tls_cert_file", cert_file), ("tls_key_file", key_file)):
        try:
            with open(path, "rb"):
                pass
        except OSError as e:
            raise ConfigError(f"web.{name}: cannot read {path}: {e.strerror or e}") from None
    try:
        ssl.create_default_context(cafile=cert_file)
    except ssl.SSLError as e:
        raise ConfigError(f"web.tls_cert_file: {cert_file} is not a PEM certificate ({e.reason or e})") from None

    def no_prompt() -> bytes:
        raise _EncryptedKey

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert_file, key_file, password=no_prompt)
    except _EncryptedKey:
        raise ConfigError(
            f"web.tls_key_file: {key_file} is encrypted (passphrase-protected); the daemon cannot prompt: "
            "decrypt it (openssl pkey -in KEY -out PLAIN) and keep it readable by the daemon only"
        ) from None
    except ssl.SSLError as e:
        what = "does not match web.tls_cert_file" if "KEY_VALUES_MISMATCH" in str(e) else "is not a PEM private key"
        raise ConfigError(f"web.tls_key_file: {key_file} {what} ({e.reason or e})") from None
    except OSError as e:
        raise ConfigError(f"web.tls_key_file: cannot load {key_file}: {e.strerror or e}") from None
    return ctx


class _EncryptedKey(Exception):
    pass
