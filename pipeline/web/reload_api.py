"""`POST /api/reload` (`outputs.web.control`): the config file read again, as SIGHUP does
(`reload.Reloader`). 200 with what took effect and what waits for a restart (JSON); 400
with the new file's problems, one line each as `validate` words them (nothing changed);
403 with control off; 409 where the run has no config file to read (`--cluster`).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pipeline.web.camera_api import answer_json, reply, text

if TYPE_CHECKING:
    from pipeline.web.request import Request

log = logging.getLogger("pipeline.web")

PATH = "/api/reload"


def post(handler: Request, _path: str = PATH) -> None:
    """The handler's POST route for `PATH` (its other POST paths go to `camera_api.post`)."""
    control = handler.app.control
    if control is None:
        handler.send(403, b"reloading the config over HTTP is off (outputs.web.control)\n")
        return
    if control.reload is None:
        reply(handler, text(409, "this run cannot reload its config (a --cluster run): restart it to apply changes"))
        return
    log.info("reload asked over HTTP")
    outcome = control.reload()
    if outcome.problems:
        reply(handler, text(400, *outcome.problems))
    else:
        reply(handler, answer_json(200, {"applied": outcome.applied, "restart": outcome.restart}))
