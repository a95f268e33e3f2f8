"""`POST /api/reload` (`outputs.web.control`): the config file read again, as SIGHUP does
(`reload.Reloader`). 200 with what took effect and what waits for a restart (JSON); 400
with the new file's problems, one line each as `validate` words them (nothing changed);
403 with control off; 409 where the run has no config file to read (`--cluster`).
"""
from __future__ import annotations

import logging
from pipeline.web.camera_api import text
from pipeline.web.request import Ask, Reply, as_json

log = logging.getLogger("pipeline.web")

PATH = "/api/reload"


def post(ask: Ask) -> Reply:
    control = ask.app.control
    if control is None:
        return Reply(403, b"reloading the config over HTTP is off (outputs.web.control)\n")
    if control.reload is None:
        return text(409, "this run cannot reload its config (a run of hosts: --cluster, --processes): "
                         "restart it to apply changes")
    log.info("reload asked over HTTP")
    outcome = control.reload()
    if outcome.problems:
        return text(400, *outcome.problems)
    return as_json({"applied": outcome.applied, "restart": outcome.restart})
