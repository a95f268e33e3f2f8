"""Which frames are shown and in what picture: a scaled copy drawn on while the frame keeps
its full-size picture, the video's rate, nothing made for frames nobody shows."""
from fractions import Fraction

import av
import numpy as np

from pipeline.config import AnnotateSpec, VideoOutputConfig
from pipeline.drawing import class_color
from pipeline.frames import ClassNames, Detections, Frame
from pipeline.metrics.registry import Metrics
from pipeline.sinks.views import Views, shown_size
from pipeline.stages.annotate import AnnotateStage

GREY = 96
BOX = (200.0, 120.0, 1000.0, 840.0)  # in the 1080p frame's pixels


def frame(seq: int = 0, size: tuple[int, int] = (1920, 1080), fps: int = 15) -> Frame:
    w, h = size
    picture = av.VideoFrame.from_ndarray(np.full((h, w, 3), GREY, np.uint8), format="bgr24").reformat(format="yuv420p")
    det = Detections(np.array([BOX], np.float32), np.array([0.9], np.float32), np.array([0], np.int64),
                     ClassNames(["person"]))
    return Frame(camera="cam", seq=seq, pts=seq * 6000, time_base=Fraction(1, 90000), image=None, t_capture=0.0,
                 rate=Fraction(fps), picture=picture, detections=det)


def annotate(views: Views, f: Frame) -> Frame:
    AnnotateStage(AnnotateSpec(path="graph[1].annotate"), Metrics(), views).process(f)
    return f


def is_box_colour(pixel: np.ndarray) -> bool:
    return bool(np.abs(pixel.astype(int) - class_color(0)).max() < 40)


def test_a_scaled_video_is_drawn_on_a_copy_while_the_frame_keeps_its_full_size_picture():
    f = annotate(Views(VideoOutputConfig(max_height=540), annotated=True), frame())
    view = f.view
    assert view is not None and view.video and view.image.shape == (540, 960, 3) and view.scale == 0.5
    assert not f.converted  # the copy was made from the decoded picture
    x1, y1, x2, _ = (round(v * 0.5) for v in BOX)
    assert is_box_colour(view.image[y1, (x1 + x2) // 2])  # the box's top edge, at the scaled place
    assert not is_box_colour(view.image[y1, x2 + 20])
    full = f.image
    assert full.shape == (1080, 1920, 3) and np.all(full == full[0, 0])  # nothing drawn on the frame itself


def test_a_video_at_the_frames_size_is_drawn_on_the_frame_itself():
    f = annotate(Views(VideoOutputConfig(), annotated=True), frame(size=(640, 360)))
    assert f.view is not None and f.view.scale == 1.0 and f.view.image is f.image


def test_the_videos_rate_skips_frames_on_the_cameras_timeline():
    views = Views(VideoOutputConfig(fps=5, max_height=180), annotated=True)
    shown = [annotate(views, frame(seq, size=(640, 360))).view is not None for seq in range(15)]  # 1 s at 15 fps
    assert shown == [i % 3 == 0 for i in range(15)]


def test_a_frame_nobody_shows_gets_no_picture_and_is_never_converted():
    f = annotate(Views(VideoOutputConfig(enabled=False), annotated=True), frame())
    assert f.view is None and not f.converted


def test_a_watched_camera_is_shown_with_the_video_off():
    watched = {"cam"}
    views = Views(VideoOutputConfig(enabled=False, max_height=540), annotated=True, wants=lambda c: c in watched)
    f = annotate(views, frame())
    assert f.view is not None and not f.view.video and f.view.image.shape == (540, 960, 3)
    watched.clear()
    assert annotate(views, frame(1)).view is None


def test_a_snapshot_beside_a_scaled_video_is_the_full_size_frame_with_its_boxes():
    views = Views(VideoOutputConfig(max_height=540), annotated=True)
    f = annotate(views, frame())
    snap = views.snapshot(f)
    x1, y1, x2, _ = (round(v) for v in BOX)
    assert snap.shape == (1080, 1920, 3) and is_box_colour(snap[y1, (x1 + x2) // 2])
    assert np.all(f.image == f.image[0, 0])  # drawn on a copy


def test_shown_sizes_keep_the_aspect_with_even_widths():
    assert shown_size(1920, 1080, 540) == (960, 540)
    assert shown_size(1280, 720, 1080) == (1280, 720)  # never scaled up
    assert shown_size(768, 576, 361) == (482, 361)
