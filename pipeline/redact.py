"""Secrets never leave the config: every URL and message shown to the outside (logs,
summary, report, APIs, event payloads, errors) goes through `redact` first.

Three kinds of secret are masked: the password of a URL's user info
(`rtsp://admin:***@host/...`), the values of query parameters with a secret-sounding
name (`?token=***`, `&client_secret=***`), and every secret value registered from the
loaded config (`register`, `register_config`), wherever it appears and however it was
written (as is, percent-encoded in a URL, escaped in JSON), so a password echoed by a
library's error message or a type error is caught too.
"""
from __future__ import annotations

import json
import logging
import re
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit

if TYPE_CHECKING:
    from pipeline.config import Config, SourceConfig

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


def _user_info(url: str) -> list[str]:
    """The secret of a URL's user info: its password, or a user name without one, which
    is then a token (`https://TOKEN@host/...`). A user name beside a password is a name
    (`hook`, `admin`): masking it would mask that word everywhere."""
    try:
        parts = urlsplit(url)
        secret = parts.password or parts.username
    except ValueError:
        return []
    return [secret] if secret else []


def register_source(source: "SourceConfig") -> None:
    """A camera's secrets: its URL's password and secret query values, its secret-named
    FFmpeg options (a camera added while running brings its own)."""
    if source.uri:
        register(*url_secrets(source.uri))
    register(*(v for k, v in source.options.items() if secret_key(k)))


def register_config(config: "Config") -> None:
    """Register every secret of a loaded config, so that it is masked wherever it shows
    up (a library's error, an echoed request): the cameras' URL passwords and secret
    query values and secret-named FFmpeg options, the MQTT password, the web token,
    and the webhook URL's user info and secret query values."""
    for source in config.sources:
        register_source(source)
    if config.outputs.web is not None:
        register(config.outputs.web.token)
    events = config.outputs.events
    if events.mqtt is not None:
        register(events.mqtt.password)
    if events.webhook is not None and events.webhook.url:
        register(*url_secrets(events.webhook.url), *_user_info(events.webhook.url))


def _mask_query(m: re.Match) -> str:
    return m.group("head") + MASK if secret_key(m.group("key")) and m.group("secret") else m.group(0)


def redact(text: str) -> str:
    """`text` with every secret masked."""
    if not text:
        return text
    text = _USERINFO.sub(lambda m: f"{m.group('head')}:{MASK}@", text)
    text = _QUERY.sub(_mask_query, text)
    pattern = _known_pattern
    return pattern.sub(MASK, text) if pattern is not None else text


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
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True
