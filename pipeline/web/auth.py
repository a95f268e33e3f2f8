"""The live view's token (`outputs.web.token`): accepted from an `Authorization: Bearer`
header (the scheme in any case), a `?token=` parameter, or the cookie the page sets.

Every comparison is constant-time, and the cookie is only ever set to the configured
token itself, percent-encoded: nothing a client sends is echoed into a header.
"""
from __future__ import annotations

import hmac
import urllib.parse
from http.cookies import CookieError, SimpleCookie
from typing import Mapping

COOKIE = "pipeline_token"


def _bearer(header: str) -> str:
    scheme, _, value = header.strip().partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def _cookie(header: str) -> str:
    try:
        morsel = SimpleCookie(header).get(COOKIE)
    except CookieError:
        return ""
    return urllib.parse.unquote(morsel.value) if morsel else ""


def is_token(given: str, token: str) -> bool:
    return bool(given) and hmac.compare_digest(given.encode(), token.encode())


def authorised(token: str | None, headers: Mapping[str, str], query_token: str) -> bool:
    """No token configured, or one of the three places holds it."""
    if not token:
        return True
    given = (_bearer(headers.get("Authorization", "")), query_token, _cookie(headers.get("Cookie", "")))
    return any(is_token(g, token) for g in given)


def set_cookie(token: str) -> str:
    """The `Set-Cookie` value that lets the page's own requests carry the token."""
    return f"{COOKIE}={urllib.parse.quote(token, safe='')}; HttpOnly; SameSite=Strict; Path=/"
