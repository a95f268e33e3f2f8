"""The tuning view's data (`GET /api/motion/<camera>`): a camera's newest motion boxes,
the areas its mask leaves out and the regions its detector looked at, in frame pixels,
with the gate's reason (`sinks.preview.Preview.motion`); the page draws them over the
camera's picture so a user can set masks and thresholds."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.web.request import Request


def serve(handler: Request, camera: str) -> None:
    if camera not in handler.app.cameras():
        handler.send(404, b"no such camera\n")
        return
    view = handler.app.preview.motion(camera)
    if view is None:
        handler.send(404, b"this camera measures no motion (detect: motion: true)\n")
    else:
        handler.send(200, json.dumps(view).encode(), "application/json")
