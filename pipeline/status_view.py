"""`pipeline status`: a running pipeline seen from a terminal or a script, through its
live view's API (`outputs.web`: `GET /api/cameras`, with the token as for the page).

The answer is read field by field by name, and what is missing shows as `-`: the API
grows, and a status from an older or newer run must still print. Figures are the recent
window's where the API has one (`recent.fps`), else the run's. Only the standard library
(and `redact`) is used: the command answers at once, without loading the pipeline. A URL
with user info (`http://user:pw@host:port`, a proxy in front of the run) reaches host:port
with it as Basic auth, and is shown without it.
"""
from __future__ import annotations

import base64
import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any

from pipeline.redact import mask_userinfo, raw_userinfo, redact

API = "/api/cameras"


class StatusError(Exception):
    """Nothing usable answered; the message is one line naming the address and why."""


@dataclass
class Recording:
    on: bool
    state: str = ""
    file: str = ""  # the segment being written, or the last one


@dataclass
class CameraRow:
    camera: str
    state: str
    fps: float | None
    processed: int | None
    drops: int | None
    recording: Recording


@dataclass
class Status:
    url: str
    elapsed_s: float | None
    fps: float | None
    processed: int | None
    cpu_percent: float | None
    cameras: list[CameraRow]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _get(data: Any, *keys: str) -> Any:
    """`data[k1][k2]...`, or None where a level is missing or not a mapping."""
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _count(value: Any) -> int | None:
    return int(value) if _number(value) is not None else None


def _text(value: Any) -> str:
    """What the server sent, as one printable line."""
    return "".join(c if c.isprintable() else "?" for c in str(value)) if value is not None else ""


def _recent_fps(data: dict, over_the_run: str) -> float | None:
    """The recent window's fps where the answer has one, else the run's (`over_the_run`)."""
    recent = _number(_get(data, "recent", "fps"))
    return recent if recent is not None else _number(data.get(over_the_run))


def _drops(camera: dict) -> int | None:
    dropped = camera.get("dropped")
    if isinstance(dropped, dict):
        return sum(int(v) for v in dropped.values() if _number(v) is not None)
    return _count(dropped)


def _recording(camera: dict) -> Recording:
    rec = camera.get("recording")
    if not isinstance(rec, dict):
        return Recording(False)
    return Recording(True, _text(rec.get("state")), _text(rec.get("file")))


def read_status(url: str, snapshot: Any) -> Status:
    """The figures `pipeline status` shows, from an `/api/cameras` answer."""
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("cameras"), dict):
        raise StatusError(f"{url}{API}: the answer is not a pipeline's camera list")
    rows = [CameraRow(_text(name), _text(cam.get("state")) or "-", _recent_fps(cam, "fps"), _count(cam.get("processed")),
                      _drops(cam), _recording(cam))
            for name, cam in sorted(snapshot["cameras"].items()) if isinstance(cam, dict)]
    return Status(url, _number(snapshot.get("elapsed_s")), _recent_fps(snapshot, "throughput_fps"), _count(snapshot.get("processed")),
                  _number(snapshot.get("cpu_percent")), rows)


def fetch(url: str, token: str | None, timeout_s: float, basic: str | None = None) -> Any:
    """The run's `/api/cameras` as JSON (`token` as a Bearer, else `basic`: the `user:password`
    of the URL given); `StatusError` with one line when nothing usable answers."""
    headers = {"Authorization": f"Bearer {token}"} if token else \
        {"Authorization": "Basic " + base64.b64encode(basic.encode()).decode()} if basic else {}
    request = urllib.request.Request(url + API, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:  # noqa: S310 (http or https only)
            body = answer.read()
    except urllib.error.HTTPError as e:
        if e.code == 401:
            raise StatusError(f"{url}: 401: {'the token was refused' if token else 'a token is needed'} "
                              "(--token, $PIPELINE_TOKEN, or outputs.web.token of --config)") from None
        raise StatusError(f"{url}{API}: HTTP {e.code} {_text(e.reason)}") from None
    except urllib.error.URLError as e:
        if isinstance(e.reason, TimeoutError):
            raise StatusError(f"{url}: no answer within {timeout_s:g} s") from None
        why = e.reason.strerror if isinstance(e.reason, OSError) and e.reason.strerror else _text(e.reason)
        raise StatusError(f"{url}: nothing answers ({why}): is the pipeline running with outputs.web on this "
                          "port?") from None
    except TimeoutError:
        raise StatusError(f"{url}: no answer within {timeout_s:g} s") from None
    except http.client.HTTPException:
        raise StatusError(f"{url}: the answer is not HTTP: is this a pipeline's web port?") from None
    except OSError as e:  # reset or cut mid-answer
        raise StatusError(f"{url}: the connection failed ({e.strerror or type(e).__name__})") from None
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise StatusError(f"{url}{API}: the answer is not JSON: is this a pipeline's web port?") from None


@dataclass(frozen=True)
class Address:
    """Where a run's web server is, and the credentials its URL held (`user:password`,
    percent-decoded; sent as Basic auth, never shown)."""

    url: str
    basic: str | None = None


def parse_url(url: str) -> Address:
    """`http(s)://host:port` without a trailing slash nor user info; ValueError naming what is
    wrong, the URL shown with all before its last `@` masked (it may not parse: no parser
    can be trusted to find its password)."""
    text = url.strip()
    shown = repr(redact(mask_userinfo(text)))
    if raw_userinfo(text) is not None:
        raise ValueError(f"--url: the user name or password holds a raw '@', '/', '?' or '#' in {shown}: write "
                         "each percent-encoded (%40, %2F, %3F, %23)")
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--url: expected http://HOST:PORT, got {shown}")
    try:
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError:
        raise ValueError(f"--url: the port is not a number in {shown}") from None
    host = parts.netloc.rpartition("@")[2]
    basic = None
    if "@" in parts.netloc:
        basic = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
    return Address(f"{parts.scheme}://{host}{parts.path.rstrip('/')}", basic)


def url_of_web(host: str, port: int) -> str:
    """Where to reach a web server that listens on `host`: on every address means here."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _figure(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _whole(value: int | None) -> str:
    return "-" if value is None else str(value)


def render(status: Status) -> str:
    """A header line, then one row per camera."""
    up = "-" if status.elapsed_s is None else f"{status.elapsed_s:.0f} s"
    lines = [f"pipeline at {status.url}: up {up}, {len(status.cameras)} camera(s), {_figure(status.fps)} fps, "
             f"{_whole(status.processed)} frames, cpu {_figure(status.cpu_percent, 0)}%"]
    table = [("camera", "state", "fps", "processed", "drops", "recording")]
    for row in status.cameras:
        rec = row.recording
        recording = "off" if not rec.on else " ".join(p for p in ("on", rec.state, rec.file) if p)
        table.append((row.camera, row.state, _figure(row.fps), _whole(row.processed), _whole(row.drops), recording))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]) - 1)]
    for r in table:
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join([*cells, r[-1]]).rstrip())
    return "\n".join(lines)
