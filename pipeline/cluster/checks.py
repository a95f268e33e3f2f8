"""What `run --cluster` demands of a config, checked by the driver before any host starts.
The driver opens no model: each host opens and checks its own (`engines.model_check`),
and a host whose models fail reports why, which the driver shows as the run's error."""
from __future__ import annotations

from dataclasses import replace

from pipeline.config import Config
from pipeline.preflight import Checked, check


def cluster_problems(config: Config) -> tuple[Config, list[str]]:
    """A JSON lines file per camera and fragmented video: a host that dies leaves playable
    files, and its cameras resume from them elsewhere."""
    problems = []
    out = config.outputs
    if out.jsonl.enabled and "{camera}" not in out.jsonl.filename:
        problems.append("outputs.jsonl.filename: --cluster needs one file per camera: put {camera} in the name")
    if not out.jsonl.enabled:
        problems.append("outputs.jsonl.enabled: --cluster needs the JSON lines (they mark where a camera resumes)")
    if out.video.fragmented is False:
        problems.append("outputs.video.fragmented: --cluster needs fragmented video (playable after a host dies)")
    video = replace(out.video, fragmented=True)
    return replace(config, outputs=replace(out, video=video)), problems


def check_for_cluster(config_path: str, output_dir: str | None, report: str | None,
                      cameras: list[str] | None) -> Checked:
    """`preflight.check` for a cluster run: its demands added, no model opened here."""
    return check(config_path, output_dir, report, cameras, for_run=True, adjust=cluster_problems, models=False)
