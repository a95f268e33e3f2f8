"""A real RTSP server for the tests that serves pre-encoded H.264 access units with the
timestamps the test chose (a camera whose clock steps back, starts late, jumps): Debian's
GStreamer RTSP server fed by an `appsrc`, run with the system python3 (it needs `gi`).

    /usr/bin/python3 rtsp_units_server.py --units DIR [--port 0]

DIR holds `units.h264` (the access units, Annex B, one after the other) and `units.json`:
one [size, pts_s, dts_s, keyframe, at_s] per unit, `at_s` when it is sent (seconds after
a client starts playing). Prints the URL once ready; each client gets the units once.
"""
import argparse
import json
import os
import sys
import threading
import time

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import Gst, GstRtspServer  # noqa: E402
from rtsp_server import serve  # noqa: E402 (beside this script)

CAPS = "video/x-h264,stream-format=byte-stream,alignment=au"


def load(folder: str) -> list[tuple[bytes, float, float, bool, float]]:
    with open(os.path.join(folder, "units.h264"), "rb") as f:
        data = f.read()
    with open(os.path.join(folder, "units.json")) as f:
        table = json.load(f)
    units, at = [], 0
    for size, pts, dts, key, when in table:
        units.append((data[at:at + size], pts, dts, key, when))
        at += size
    return units


def feed(appsrc, units) -> None:
    """Push each unit at its time, with its own timestamps."""
    t0 = time.monotonic()
    for data, pts, dts, key, when in units:
        delay = t0 + when - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        buf = Gst.Buffer.new_wrapped(data)
        buf.pts, buf.dts = int(pts * Gst.SECOND), int(dts * Gst.SECOND)
        if not key:
            buf.set_flags(Gst.BufferFlags.DELTA_UNIT)
        if appsrc.emit("push-buffer", buf) != Gst.FlowReturn.OK:
            return
    appsrc.emit("end-of-stream")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--units", required=True)
    args = ap.parse_args()
    units = load(args.units)
    Gst.init(None)
    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(f"( appsrc name=src is-live=true format=time caps={CAPS} ! h264parse ! "
                       f"rtph264pay name=pay0 pt=96 config-interval=1 )")
    factory.set_shared(False)

    def configure(_factory, media):
        appsrc = media.get_element().get_by_name_recurse_up("src")
        threading.Thread(target=feed, args=(appsrc, units), daemon=True).start()

    factory.connect("media-configure", configure)
    return serve(factory, args.port)


if __name__ == "__main__":
    sys.exit(main())
