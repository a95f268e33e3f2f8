"""Placement by cost and failover logic, without Ray: hosts are in-process stand-ins."""
from __future__ import annotations

import pytest

from dataclasses import replace

from pipeline.cluster.driver import ClusterDriver, HostGone, HostState, direct_call
from pipeline.cluster.placement import CameraLoad, CostModel, Host, hosts_needed, place
from pipeline.cluster.status import HostStatus
from pipeline.metrics.histogram import Histogram
from pipeline.metrics.snapshot import CameraSnapshot, Latency
from pipeline.config import parse_config

MODEL = CostModel()


def test_cameras_go_largest_first_to_the_host_with_the_most_room():
    cams = [CameraLoad("big", 30, 1920 * 1080), CameraLoad("mid", 15, 1920 * 1080)] + \
           [CameraLoad(f"s{i}", 10, 640 * 480) for i in range(4)]
    hosts = [Host("a", 2000), Host("b", 2000)]
    placed = place(cams, hosts, MODEL)
    assert placed["big"] != placed["mid"]
    loads = sorted(h.load for h in hosts)
    assert loads[1] - loads[0] < cams[0].cost(MODEL)  # balanced within one camera's cost


def test_hosts_keep_their_cameras_when_others_are_placed():
    hosts = [Host("a", 2000, cameras={"old": 900.0}), Host("b", 2000)]
    placed = place([CameraLoad("new", 10, 640 * 480)], hosts, MODEL)
    assert placed == {"new": "b"} and hosts[0].cameras == {"old": 900.0}


def test_hosts_needed_for_a_fleet():
    cams = [CameraLoad(f"c{i}", 15, 1920 * 1080) for i in range(100)]
    per_camera = cams[0].cost(MODEL)
    need = hosts_needed(cams, capacity=8000, model=MODEL, headroom=0.75)
    assert need == -(-100 // int(0.75 * 8000 // per_camera))


class FakeHost:
    """A host that runs nothing: it reports its cameras as streaming until told to end
    them; `dead` answers as a dead actor does, `hung` as one that does not answer."""

    def __init__(self, name: str, log: list):
        self.name, self.cameras, self.dead, self.hung, self.log = name, {}, False, False, log
        self.resumes: dict = {}
        self.recent = Histogram()  # its cameras' latencies over the recent window

    def add(self, source, resume):
        self.log.append(("add", self.name, source.id))
        self.cameras[source.id] = CameraSnapshot(state="streaming")
        self.resumes[source.id] = resume

    def remove(self, camera):
        self.cameras[camera].state = "ended"

    def status(self):
        if self.dead:
            raise HostGone("ActorDiedError")
        if self.hung:
            raise TimeoutError("no answer")
        return HostStatus(self.name, "n-" + self.name, self.cameras,
                          [c for c, v in self.cameras.items() if v.state not in ("ended", "failed")],
                          recent_counts=self.recent.counts.tolist(), recent_total=self.recent.total,
                          recent_max=self.recent.max)


def driver_of(config, fakes: dict, **options) -> ClusterDriver:
    def kill(host: HostState) -> None:
        fakes[host.name].dead = True
        fakes[host.name].log.append(("kill", host.name))

    return ClusterDriver(config, [HostState(n, f, 1000) for n, f in fakes.items()], direct_call, kill, **options)


@pytest.fixture
def live_config(tmp_path):
    data = {"sources": [{"id": f"cam{i}", "uri": f"rtsp://127.0.0.1:1/{i}"} for i in range(6)],
            "models": {"det": {"path": __file__, "layout": "yolox", "input_size": 416}},
            "graph": [{"detect": {"model": "det"}}],
            "outputs": {"dir": str(tmp_path / "out"), "jsonl": {"filename": "{camera}.jsonl"}}}
    return parse_config(data, tmp_path)


def test_a_lost_hosts_cameras_move_to_the_survivors(live_config):
    log: list = []
    fakes = {n: FakeHost(n, log) for n in ("h0", "h1", "h2")}
    driver = driver_of(live_config, fakes)
    driver.start()
    assert sorted(len(f.cameras) for f in fakes.values()) == [2, 2, 2]
    lost = set(fakes["h1"].cameras)
    fakes["h1"].dead = True
    driver.poll()
    assert not driver.hosts["h1"].alive and "host h1 on ? lost (ActorDiedError)" in driver.incidents[0]
    moved = {c for n in ("h0", "h2") for c in fakes[n].cameras} & lost
    assert moved == lost and sorted(len(fakes[n].cameras) for n in ("h0", "h2")) == [3, 3]
    for cam in lost:  # live cameras continue from now, in their next video segment, appending their JSON lines
        host = next(f for f in fakes.values() if not f.dead and cam in f.cameras)
        resume = host.resumes[cam]
        assert resume.append and resume.start_at == 0 and resume.epoch == 3  # start 1, fenced 2, moved 3
    snap = driver.snapshot()
    assert {c.host for c in snap.cameras.values()} == {"h0", "h2"}
    assert all(c.moves == 1 for cam, c in snap.cameras.items() if cam in lost)


def test_a_hung_host_is_killed_before_its_cameras_move(live_config):
    log: list = []
    fakes = {n: FakeHost(n, log) for n in ("h0", "h1")}
    driver = driver_of(live_config, fakes, host_timeout_s=0.0)
    driver.start()
    fakes["h0"].hung = True
    driver.poll()
    assert "no answer for" in driver.incidents[0]
    kill = log.index(("kill", "h0"))
    assert kill < min(i for i, e in enumerate(log) if e[0] == "add" and e[1] == "h1" and i > len(live_config.sources))
    assert len(fakes["h1"].cameras) == 6


def test_placement_counts_only_the_cameras_still_running(live_config):
    log: list = []
    fakes = {n: FakeHost(n, log) for n in ("h0", "h1")}
    driver = driver_of(live_config, fakes)
    driver.start()
    for cam in list(fakes["h1"].cameras):  # h1's cameras end; h0's go on (h0 wins a tie by name)
        driver.remove(cam)
    driver.poll()
    driver.add([replace(live_config.sources[0], id="extra")])
    assert "extra" in fakes["h1"].cameras


def test_the_run_is_finished_when_every_camera_ended(live_config):
    fakes = {"h0": FakeHost("h0", [])}
    driver = driver_of(live_config, fakes)
    driver.start()
    driver.poll()
    assert not driver.finished()
    for cam in list(fakes["h0"].cameras):
        driver.remove(cam)
    driver.poll()
    assert driver.finished()


def test_a_camera_cannot_run_twice(live_config):
    driver = driver_of(live_config, {"h0": FakeHost("h0", [])})
    driver.start()
    with pytest.raises(ValueError, match="already running"):
        driver.add([live_config.sources[0]])


class RefusingHost(FakeHost):
    def add(self, source, resume):
        raise RuntimeError("ValueError: no room for it")


def test_cameras_no_host_can_run_are_failed_and_the_run_can_end(live_config):
    """A host refusing a camera, or every host lost: the camera is failed in the summary
    and done, so the run ends instead of waiting for it for ever."""
    fakes = {"h0": FakeHost("h0", []), "h1": RefusingHost("h1", [])}
    driver = driver_of(live_config, fakes)
    driver.start()
    refused = {c for c, st in driver.cameras.items() if st.done}
    assert refused and refused | set(fakes["h0"].cameras) == {s.id for s in live_config.sources}
    assert {driver.snapshot().cameras[c].state for c in refused} == {"failed"}
    fakes = {n: FakeHost(n, []) for n in ("h0", "h1")}
    driver = driver_of(live_config, fakes)
    driver.start()
    fakes["h0"].dead = fakes["h1"].dead = True
    driver.poll()
    snap = driver.snapshot()
    assert driver.finished() and set(snap.cameras) == {s.id for s in live_config.sources}
    assert {c.state for c in snap.cameras.values()} == {"failed"}


def test_the_runs_recent_p99_is_its_live_hosts_latencies_together(live_config):
    """The page's header and /api/cameras show the run's P99 over the last seconds: the
    hosts' recent histograms merged (their P99s do not add up), a lost host's left out."""
    fakes = {n: FakeHost(n, []) for n in ("h0", "h1")}
    for latency in [0.01] * 90:
        fakes["h0"].recent.record(latency)
    for latency in [0.5] * 10:
        fakes["h1"].recent.record(latency)
    driver = driver_of(live_config, fakes)
    driver.start()
    driver.poll()
    both = Histogram()
    both.merge(fakes["h0"].recent)
    both.merge(fakes["h1"].recent)
    assert driver.snapshot().recent.latency == Latency.of(both)
    assert driver.snapshot().recent.latency.p99_ms >= 400  # h1's slow tenth of the frames sets it
    fakes["h1"].dead = True
    driver.poll()
    assert driver.snapshot().recent.latency == Latency.of(fakes["h0"].recent)
