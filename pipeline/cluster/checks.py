"""What `run --cluster` demands of a config, checked by the driver before any host starts.
The driver opens no model: each host opens and checks its own (`engines.model_check`),
and a host whose models fail reports why, which the driver shows as the run's error."""
from __future__ import annotations

import logging
import os
from dataclasses import replace

from pipeline.config import Config
from pipeline.preflight import Checked, check

log = logging.getLogger("pipeline.cluster")


def per_camera(filename: str) -> str:
    """A shared JSON lines name made one per camera: `{camera}` before the extension."""
    if "{camera}" in filename:
        return filename
    stem, ext = os.path.splitext(filename)
    return f"{stem}.{{camera}}{ext}"


def cluster_problems(config: Config, flag: str = "--cluster") -> tuple[Config, list[str]]:
    """A JSON lines file per camera and fragmented video: a host that dies leaves playable
    files, and its cameras resume from them elsewhere. Hosts cannot share one JSON lines
    file, so a shared name gets the camera in it (said once)."""
    problems = []
    out = config.outputs
    jsonl = replace(out.jsonl, filename=per_camera(out.jsonl.filename))
    if out.jsonl.enabled and jsonl.filename != out.jsonl.filename:
        log.info("outputs.jsonl.filename: a %s run writes one file per camera: %s", flag, jsonl.filename)
    if not out.jsonl.enabled:
        problems.append(f"outputs.jsonl.enabled: {flag} needs the JSON lines (they mark where a camera resumes)")
    if out.video.fragmented is False:
        problems.append(f"outputs.video.fragmented: {flag} needs fragmented video (playable after a host dies)")
    video = replace(out.video, fragmented=True)
    return replace(config, outputs=replace(out, video=video, jsonl=jsonl)), problems


def processes_problems(config: Config) -> tuple[Config, list[str]]:
    """A cluster's demands, and what host processes of one machine cannot share: the one
    Home Assistant node whose availability a process's last will would take down."""
    config, problems = cluster_problems(config, "--processes")
    mqtt = config.outputs.events.mqtt
    if mqtt is not None and mqtt.homeassistant is not None:
        problems.append("outputs.events.mqtt.homeassistant: --processes cannot announce one Home Assistant node "
                        "from several processes: run without --processes, or leave homeassistant out")
    return config, problems


def check_for_cluster(config_path: str, output_dir: str | None, report: str | None,
                      cameras: list[str] | None, processes: bool = False) -> Checked:
    """`preflight.check` for a cluster run (`processes`: host processes of this machine):
    its demands added, no model opened here."""
    return check(config_path, output_dir, report, cameras, for_run=True, models=False,
                 adjust=processes_problems if processes else cluster_problems)
