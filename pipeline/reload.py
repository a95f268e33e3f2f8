"""Lines, zones and masks changed without a restart: the config file is read again (on
SIGHUP, or `POST /api/reload` with `outputs.web.control`), the way `run` read it (with its
`--output`, `--report` and `--cameras`), and checked as `run` checks it.

What changes while running: each camera's lines and zones (`graph[i].analytics.cameras`)
and its motion mask (`sources[i].motion.mask`). Anything else that differs from what runs
is named by its YAML path as needing a restart, and is not applied. A file with mistakes
changes nothing: every problem is reported, one line each, as `validate` words it. Counts
already made stay (`stages.analytics` says how a changed line or zone goes on).
"""
from __future__ import annotations

import threading
from dataclasses import fields, is_dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

from pipeline.config import AnalyticsSpec, Config, ConfigError, StageSpec
from pipeline.config.secrets import register_config
from pipeline.control import Reloaded
from pipeline.frames import ClassNames
from pipeline.sources.borders import Borders
from pipeline.stages.analytics import AnalyticsStage

if TYPE_CHECKING:
    from pipeline.graph import Pipeline

def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """The YAML paths where `b` differs from `a` (dataclasses field by field, mappings by
    key, lists of one length item by item; fields the program fills in are skipped)."""
    if type(a) is not type(b):
        return [path]
    if is_dataclass(a):
        base = a.path if isinstance(a, StageSpec) and a.path else path  # graph[i].<type>
        return [d for f in fields(a) if f.compare
                for d in differences(getattr(a, f.name), getattr(b, f.name), f"{base}.{f.name}".lstrip("."))]
    if isinstance(a, dict):
        return [d for k in dict.fromkeys([*a, *b])
                for d in (differences(a[k], b[k], f"{path}.{k}") if k in a and k in b else [f"{path}.{k}"])]
    if isinstance(a, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [path]


def with_live(base: Config, live: Config) -> Config:
    """`base` with the parts of `live` that change while running: the analytics stage's
    cameras (a stage at the same place in the graph) and each camera's motion mask (by id)."""
    graph = [replace(spec, cameras=other.cameras) if isinstance(spec, AnalyticsSpec) and isinstance(other, AnalyticsSpec)
             else spec for spec, other in zip(base.graph, live.graph)] + base.graph[len(live.graph):]
    masks = {s.id: s.motion.mask for s in live.sources}
    sources = [replace(s, motion=replace(s.motion, mask=masks[s.id])) if s.id in masks else s for s in base.sources]
    return replace(base, graph=graph, sources=sources)


def _names(items: list) -> str:
    return ", ".join(item.name for item in items) or "none"


class Reloader:
    """Reads the config again and applies it to `pipeline`; called from the run loop (a
    SIGHUP) and from the web server's threads, one at a time. `read` gives the config
    as the run read it and its problems (`preflight.read_for_run`)."""

    def __init__(self, read: Callable[[], tuple[Config, list[str]]], pipeline: Pipeline):
        self.read = read
        self.pipeline = pipeline
        self.current = pipeline.config  # what runs: the started config, with the live parts applied since
        self._lock = threading.Lock()

    def __call__(self) -> Reloaded:
        with self._lock:
            outcome = self._reload()
        outcome.log()
        return outcome

    def _reload(self) -> Reloaded:
        try:
            new, problems = self.read()
        except ConfigError as e:  # the file is gone, or not YAML
            return Reloaded(problems=e.problems)
        if problems:
            return Reloaded(problems=problems)
        register_config(new)
        outcome = Reloaded(restart=differences(self.current, with_live(new, self.current)))
        running = with_live(self.current, new)
        self._apply_analytics(running, outcome)
        self._apply_masks(running, outcome)
        self.current = running
        return outcome

    def _apply_analytics(self, running: Config, outcome: Reloaded) -> None:
        """Each analytics stage takes its new cameras' lines and zones; the detect gate of a
        camera whose lines changed watches the new ones (behind a rate)."""
        names = ClassNames(running.detector.labels)
        for before, after, stage in zip(self.current.graph, running.graph, self.pipeline.stages):
            if not isinstance(after, AnalyticsSpec) or not isinstance(stage, AnalyticsStage) or before == after:
                continue
            assert isinstance(before, AnalyticsSpec)
            stage.update(after)
            first = after is next(s for s in running.graph if isinstance(s, AnalyticsSpec))  # the one gates watch
            for cam in dict.fromkeys([*before.cameras, *after.cameras]):
                spec = after.cameras.get(cam)
                if spec == before.cameras.get(cam):
                    continue
                lines, zones = (spec.lines, spec.zones) if spec is not None else ([], [])
                outcome.applied.append(f"{after.path}.cameras.{cam}: lines {_names(lines)}; zones {_names(zones)}")
                if first and not self._watch(cam, Borders.of(spec, names)):
                    outcome.restart.append(f"{after.path}.cameras.{cam} (the detect gate's border watch: lines or "
                                           "zones added to a camera that had none, or all taken away)")

    def _watch(self, camera: str, borders: Borders) -> bool:
        gates = [s.gate for s in self.pipeline.sources if s.camera == camera and s.gate is not None]
        return all([gate.watch(borders) for gate in gates])

    def _apply_masks(self, running: Config, outcome: Reloaded) -> None:
        before = {s.id: s for s in self.current.sources}
        for i, source in enumerate(running.sources):
            if source.motion.mask == before[source.id].motion.mask:
                continue
            for gate in (s.gate for s in self.pipeline.sources if s.camera == source.id and s.gate is not None):
                if gate.motion is not None:
                    gate.motion.set_mask(source.motion.mask)
            outcome.applied.append(f"sources[{i}].motion.mask: {len(source.motion.mask)} polygon(s)")

    def offer_over_http(self) -> None:
        """`POST /api/reload` reloads too where the run serves the control API
        (`outputs.web.control`)."""
        web = self.pipeline.side.web
        if web is not None and web.control is not None:
            web.control.reload = self
