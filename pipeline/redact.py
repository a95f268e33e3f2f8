"""Secrets never leave the config: every URL and message shown to the outside (logs,
summary, report, APIs, event payloads, errors) goes through `redact` first.

Three kinds of secret are masked: the password of a URL's user info
(`rtsp://admin:***@host/...`), the values of query parameters with a secret-sounding
name (`?token=***`, `&client_secret=***`), and every secret value registered from the
loaded config (`register`; the config's own are registered by
`pipeline.config.secrets`), wherever it appears and however it was
written (as is, percent-encoded in a URL, escaped in JSON), so a password echoed by a
library's error message or a type error is caught too.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
from typing import Any
from urllib.parse import quote, unquote, urlsplit

MASK = "***"
# names (of query parameters, config fields, FFmpeg options) whose values are secrets: these
# names themselves, and any name ending in one of them after `_` or `-` (`client_secret`)
SECRET_KEYS = ("token", "access_token", "password", "passwd", "pwd", "pass", "secret", "key", "apikey", "api_key",
               "auth", "authorization", "signature", "sig", "credential", "credentials", "session", "sessionid",
               "jwt")
# user info ends at the last `@` before the path, query or fragment (as FFmpeg reads it),
# so a password holding a raw `@` is masked whole
_USERINFO = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:@/\s?#]*):(?P<secret>[^/\s?#]*)@")
# a query value ends at the next parameter, a quote or markup, or the `: ` of a message
_QUERY = re.compile(r"(?P<head>[?&;](?P<key>[A-Za-z0-9_.\-]+)=)(?P<secret>(?:[^&;#\s\"'<>\\:]|:(?![\s]|$))*)")
_MIN_LENGTH = 3  # shorter registered values would mask ordinary words and numbers

_lock = threading.Lock()
_known: set[str] = set()
_known_pattern: re.Pattern | None = None


def secret_key(name: str) -> bool:
    """Whether a query parameter, config field or option of this name holds a secret."""
    key = name.lower().replace("-", "_")
    return key in SECRET_KEYS or any(key.endswith("_" + k) for k in SECRET_KEYS)


def _spellings(text: str) -> set[str]:
    """The ways a value appears in what we show: as is, percent-encoded or -decoded (in
    a URL), and escaped inside a JSON string."""
    return {text, quote(text, safe=""), unquote(text), json.dumps(text)[1:-1]}


def register(*values: object) -> None:
    """Mask these values wherever they appear from now on (config passwords, tokens)."""
    global _known_pattern
    with _lock:
        for v in values:
            if v is None or isinstance(v, bool):
                continue
            _known.update(s for s in _spellings(str(v)) if len(s) >= _MIN_LENGTH)
        if _known:
            ordered = sorted(_known, key=len, reverse=True)  # a secret inside a longer one: the longer first
            _known_pattern = re.compile("|".join(map(re.escape, ordered)))


def url_secrets(url: str) -> list[str]:
    """The secrets a URL carries: its user info's password and secret query values."""
    found = [m.group("secret") for m in _USERINFO.finditer(url)]
    found += [m.group("secret") for m in _QUERY.finditer(url) if secret_key(m.group("key"))]
    return [s for s in found if s]


def user_info(url: str) -> list[str]:
    """The secret of a URL's user info: its password, or a user name without one, which
    is then a token (`https://TOKEN@host/...`). A user name beside a password is a name
    (`hook`, `admin`): masking it would mask that word everywhere."""
    try:
        parts = urlsplit(url)
        secret = parts.password or parts.username
    except ValueError:
        return []
    return [secret] if secret else []


def raw_userinfo(url: str) -> str | None:
    """The text between a URL's `://` and its last `@` when it holds an `@`, `/`, `?` or
    `#`: its user info as FFmpeg would read it, which other readers end early (libpq ends
    the password at the first `@` and takes the rest for the host; `urlsplit` and this
    module's masking end it at `/`, `?` or `#`), so its tail would show in clear. None for
    a URL whose user info every reader takes alike (or that has none)."""
    info, at, _ = url.partition("://")[2].rpartition("@")
    return info if at and any(c in info for c in "@/?#") else None


def mask_userinfo(text: str) -> str:
    """One URL as given, with everything between its `://` (its start, without one) and its
    last `@` masked: for an error line about a URL that may not parse, whose user info
    no parser can be trusted to find (`bob:pw@host`, `http://bob:p#w@host`)."""
    head, sep, rest = text.partition("://") if "://" in text else ("", "", text)
    _, at, tail = rest.rpartition("@")
    return f"{head}{sep}{MASK}@{tail}" if at else text


def userinfo_problem(url: str) -> str | None:
    """Why a URL's user info cannot be read as meant (`raw_userinfo`), the URL shown with
    that whole text masked; None when it can. The text and its password are registered
    as secrets first: no line, log or driver's error shown from now on holds them."""
    info = raw_userinfo(url)
    if info is None:
        return None
    register(info, info.partition(":")[2] or None)
    return (f"{redact(mask_userinfo(url))}: its user name or password holds a raw '@', '/', '?' or '#': write each "
            "percent-encoded (%40, %2F, %3F, %23), e.g. user:p%40ss@host")


def _mask_query(m: re.Match) -> str:
    return m.group("head") + MASK if secret_key(m.group("key")) and m.group("secret") else m.group(0)


def redact(text: str) -> str:
    """`text` with every secret masked."""
    if not text:
        return text
    pattern = _known_pattern
    text = pattern.sub(MASK, text) if pattern is not None else text  # first: a URL's masking would cut one apart
    text = _USERINFO.sub(lambda m: f"{m.group('head')}:{MASK}@", text)
    return _QUERY.sub(_mask_query, text)


def redact_data(value: Any) -> Any:
    """A copy of data (dicts, lists, strings, dataclass records of them) with every string
    redacted, keys too; a record stays a record of its type."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(k) if isinstance(k, str) else k: redact_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_data(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: redact_data(getattr(value, f.name))
                                             for f in dataclasses.fields(value) if f.init})
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
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True
