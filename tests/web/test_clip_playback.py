"""An event's clip on the page while it is still being written (for `post_s` after its
event, when a viewer is most likely to click it): it plays up to its last whole
fragment, or, with nothing whole yet, the page says it is still recording."""
from __future__ import annotations

import os
from fractions import Fraction

import av

from pipeline.config.outputs import WebConfig
from pipeline.frames import Event
from pipeline.metrics.snapshot import Snapshot
from pipeline.events.clips import ClipRecorder
from pipeline.events.event_evidence import RecentEvents
from pipeline.sinks.preview import Preview
from pipeline.web.server import WebServer
from web_support import browser, wait_for


CLIP_STATE = ("const b = document.getElementById('evidence'), v = b.querySelector('.clip'), "
              "n = b.querySelector('.clip-note');"
              "return b.open && {ready: v.readyState, duration: v.duration, error: v.error && v.error.code, "
              "note: n.hidden ? null : n.textContent};")


def test_a_clip_still_being_written_plays_on_the_page_up_to_now_or_says_it_is_still_recording(tmp_path,
                                                                                              sample_path):
    """A clip is open for `post_s` after its event, when a viewer is most likely to click
    it: written as a plain MP4 (no index until closed) it showed an empty 0:00 player
    (media error 4) and no word."""
    out = tmp_path / "out"
    rec = ClipRecorder(str(out / "events" / "campus"), pre_s=2.0, post_s=60.0)
    with av.open(sample_path("vtest.mp4")) as source, av.open(str(tmp_path / "video.mp4"), "w") as video:
        stream = video.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 768, 576, "yuv420p"
        stream.options = {"preset": "ultrafast", "g": "10"}
        for i, frame in enumerate(source.decode(video=0)):
            frame.pts, frame.time_base = i, Fraction(1, 10)
            for packet in stream.encode(frame.reformat(format="yuv420p")):
                rec.packet(packet, stream)
                video.mux(packet)
            if i == 30:
                clip = rec.event("20261201T120003.000Z_30", 3.0).path
            if i == 50:
                break
        assert rec.open_files == [clip]  # still being written: post_s lasts a minute
        header = out / "events" / "campus" / "20261201T120005.000Z_50.mp4"  # a clip in its first moment
        with open(clip, "rb") as f:
            first_boxes = f.read(4096)
        size = 0
        for _ in range(2):  # ftyp and the empty moov: no frame yet
            size += int.from_bytes(first_boxes[size:size + 4], "big")
        header.write_bytes(first_boxes[:size])
        recent = RecentEvents()
        recent.add([Event("campus", 30, 30, 7, "person", "cross", line="path", direction="in", time=1796212803.0,
                          clip=os.path.relpath(clip, out)),
                    Event("campus", 50, 50, 8, "person", "cross", line="path", direction="in", time=1796212805.0,
                          clip=os.path.relpath(header, out))])
        preview = Preview()
        server = WebServer(WebConfig(port=0), Snapshot, preview, events=recent.newest, evidence_dir=str(out))
        server.start()
        d = browser()
        try:
            d.get(f"http://127.0.0.1:{server.port}/")
            opened = []
            for event_id in (1, 2):
                item = wait_for(lambda: d.find_elements("css selector", f'#event-list .event[data-id="{event_id}"]'))
                item[0].click()
                opened.append(wait_for(lambda: (lambda s: s if s and (s["ready"] >= 2 or s["note"]) else None)(
                    d.execute_script(CLIP_STATE)), 20))
                d.execute_script("document.getElementById('evidence').close()")
        finally:
            d.quit()
            server.close()
            preview.close()
            rec.close()
    playing, waiting = opened
    assert playing and playing["error"] is None and playing["note"] is None
    assert playing["duration"] >= 2.0  # the pre-roll and what followed, up to the last whole fragment
    assert waiting and waiting["note"].startswith("still recording")
