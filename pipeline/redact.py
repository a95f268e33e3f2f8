"""Secrets never leave the config: every URL and message shown to the outside (logs,
summary, report, APIs, event payloads, errors) goes through `redact` first.

Three kinds of secret are masked: the password of a URL's user info
(`rtsp://admin:***@host/...`), the values of query parameters with a secret-sounding
name (`?token=***`), and every secret value registered from the loaded config
(`register`), wherever it appears, so a password echoed by a library's error message
or a type error is caught too.
"""
from __future__ import annotations

import logging
import re
import threading
from typing import Any

MASK = "***"
SECRET_KEYS = ("token", "access_token", "password", "passwd", "pwd", "pass", "secret", "key", "apikey", "api_key",
               "auth", "signature", "sig", "credential", "credentials")
_USERINFO = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:@/\s]*):(?P<secret>[^@/\s]*)@")
_QUERY = re.compile(r"(?P<head>[?&;](?:%s)=)(?P<secret>[^&#\s\"'<>]*)" % "|".join(SECRET_KEYS), re.IGNORECASE)
_MIN_LENGTH = 3  # shorter registered values would mask ordinary words and numbers

_lock = threading.Lock()
_known: set[str] = set()


def register(*values: object) -> None:
    """Mask these values wherever they appear from now on (config passwords, tokens)."""
    with _lock:
        for v in values:
            if v is None or isinstance(v, bool):
                continue
            text = str(v)
            if len(text) >= _MIN_LENGTH:
                _known.add(text)


def url_secrets(url: str) -> list[str]:
    """The secrets a URL carries: its user info's password and secret query values."""
    found = [m.group("secret") for m in _USERINFO.finditer(url)]
    found += [m.group("secret") for m in _QUERY.finditer(url)]
    return [s for s in found if s]


def redact(text: str) -> str:
    """`text` with every secret masked."""
    if not text:
        return text
    text = _USERINFO.sub(lambda m: f"{m.group('head')}:{MASK}@", text)
    text = _QUERY.sub(lambda m: f"{m.group('head')}{MASK}", text)
    with _lock:
        known = sorted(_known, key=len, reverse=True)
    for secret in known:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def redact_data(value: Any) -> Any:
    """A copy of JSON-like data (dicts, lists, strings) with every string redacted, keys too."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(k) if isinstance(k, str) else k: redact_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_data(v) for v in value]
    return value


class RedactingFilter(logging.Filter):
    """Log records leave with their secrets masked (whatever library or stage wrote them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True
