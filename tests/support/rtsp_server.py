"""A real RTSP server for the tests: Debian's GStreamer RTSP server, run with the system
python3 (it needs `gi`). Serves `/cam` on 127.0.0.1 and prints the URL once ready.

    /usr/bin/python3 rtsp_server.py --port 0 --pattern ball --size 320x240 --fps 15
    /usr/bin/python3 rtsp_server.py --codec h265 --bframes 2   (HEVC; H.264 with B-frames likewise)
    /usr/bin/python3 rtsp_server.py --file clip.mp4          (H.264 MP4, real-time pace)
"""
import argparse
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def encoder(args) -> str:
    """The encoder and payloader: x264 without B-frames (zero latency) unless asked for
    them (then the main profile, which allows them), or x265."""
    if args.codec == "h265":
        return (f"x265enc tune=zerolatency speed-preset=ultrafast key-int-max={args.fps} ! "
                f"rtph265pay name=pay0 pt=96")
    if args.bframes:
        return (f"x264enc speed-preset=veryfast key-int-max={args.fps} bframes={args.bframes} b-adapt=false ! "
                f"video/x-h264,profile=main ! rtph264pay name=pay0 pt=96")
    return (f"x264enc tune=zerolatency speed-preset=ultrafast key-int-max={args.fps} ! "
            f"rtph264pay name=pay0 pt=96")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--file")
    ap.add_argument("--pattern", default="ball")
    ap.add_argument("--size", default="320x240")
    ap.add_argument("--fps", type=int, default=15)
    ap.add_argument("--codec", choices=("h264", "h265"), default="h264")
    ap.add_argument("--bframes", type=int, default=0)
    args = ap.parse_args()
    Gst.init(None)
    if args.file:
        launch = f"( filesrc location={args.file} ! qtdemux ! h264parse ! rtph264pay name=pay0 pt=96 config-interval=1 )"
    else:
        w, h = args.size.split("x")
        launch = (f"( videotestsrc is-live=true pattern={args.pattern} ! video/x-raw,width={w},height={h},"
                  f"framerate={args.fps}/1 ! videoconvert ! {encoder(args)} config-interval=1 )")
    factory = GstRtspServer.RTSPMediaFactory()
    factory.set_launch(launch)
    factory.set_shared(True)
    return serve(factory, args.port)


def serve(factory, port: int) -> int:
    """Serve `factory` at /cam on 127.0.0.1:`port` (0: any), print the URL once bound, run."""
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(port))
    server.get_mount_points().add_factory("/cam", factory)
    if server.attach(None) == 0:
        print(f"cannot bind 127.0.0.1:{port}", file=sys.stderr, flush=True)
        return 1
    print(f"rtsp://127.0.0.1:{server.get_bound_port()}/cam", flush=True)
    GLib.MainLoop().run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
