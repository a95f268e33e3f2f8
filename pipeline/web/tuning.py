"""The tuning view's data (`GET /api/motion/<camera>`): a camera's newest motion boxes,
the areas its mask leaves out and the regions its detector looked at, in frame pixels,
with the gate's reason (`sinks.preview.Preview.motion`); the page draws them over the
camera's picture so a user can set masks and thresholds."""
from __future__ import annotations

from pipeline.web.request import Ask, Reply, as_json


def serve(ask: Ask) -> Reply:
    """`GET /api/motion/<camera>` (`ask.path`: the camera)."""
    if ask.path not in ask.app.cameras():
        return Reply(404, b"no such camera\n")
    view = ask.app.preview.motion(ask.path)
    if view is None:
        return Reply(404, b"this camera measures no motion (detect: motion: true)\n")
    return as_json(view)
