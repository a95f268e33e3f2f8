"""The pages (`GET /`: the live page; `GET /review`: what the store holds, across cameras:
the timeline, tracks, playback, counts and exports) and the scripts they share (`GET
/static/<name>`: the recording player). Served from the package, read once; opened with
the right `?token=`, a page also gets the cookie its own requests use.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.web.auth import is_token, set_cookie

if TYPE_CHECKING:
    from pipeline.web.request import Request

HERE = Path(__file__).parent
FILES = {"/": ("page.html", "text/html; charset=utf-8"), "/review": ("review.html", "text/html; charset=utf-8"),
         "/static/playback.js": ("playback.js", "text/javascript; charset=utf-8")}
_BODIES = {path: (HERE / name).read_bytes() for path, (name, _) in FILES.items()}


def serve(handler: Request, path: str, token: str) -> None:
    """One of `FILES` (the caller routes only those here)."""
    configured = handler.app.config.token
    page = FILES[path][1].startswith("text/html")
    headers = {"Set-Cookie": set_cookie(configured)} if page and configured and is_token(token, configured) else {}
    handler.send(200, _BODIES[path], FILES[path][1], headers)
