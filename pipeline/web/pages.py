"""The pages (`GET /`: the live page; `GET /review`: what the store holds, across cameras:
the timeline, tracks, playback, counts and exports) and the scripts they share (`GET
/static/<name>.js`: the package's scripts, the recording player among them). Served from
the package, read once; opened with the right `?token=`, a page also gets the cookie its
own requests use.
"""
from __future__ import annotations

from pathlib import Path

from pipeline.web.auth import is_token, set_cookie
from pipeline.web.request import Ask, Reply

HERE = Path(__file__).parent
HTML = "text/html; charset=utf-8"
FILES = {"/": ("page.html", HTML), "/review": ("review.html", HTML),
         **{f"/static/{p.name}": (p.name, "text/javascript; charset=utf-8") for p in sorted(HERE.glob("*.js"))}}
_BODIES = {path: (HERE / name).read_bytes() for path, (name, _) in FILES.items()}


def serve(ask: Ask) -> Reply:
    """One of `FILES` (`ask.path`: its path; the server routes only those here)."""
    configured = ask.app.config.token
    content_type = FILES[ask.path][1]
    cookie = content_type == HTML and bool(configured) and is_token(ask.token, configured or "")
    return Reply(200, _BODIES[ask.path], content_type, {"Set-Cookie": set_cookie(configured)} if cookie else {})
