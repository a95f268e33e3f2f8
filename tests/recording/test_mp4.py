"""A video on a disk that fills up plays up to its last whole fragment: a plain MP4
finishes (index written) while there is room for its index and the writer goes on in
fragmented MP4; the fragment torn by the full disk is cut off; every frame given is in
a file or counted lost."""
import errno
import time
from fractions import Fraction

import av
import numpy as np
import pytest

from pipeline.config import VideoOutputConfig
from pipeline.frames import Frame
from pipeline.recording.mp4 import cut_to_whole_fragments, whole_fragments_end
from pipeline.sinks.encoder import VideoWriter, free_bytes


def noise(seq: int, rng) -> Frame:
    """A frame that does not compress: the disk fills in a few hundred frames."""
    image = rng.integers(0, 255, (120, 160, 3), np.uint8)
    return Frame("cam", seq, seq, Fraction(1, 25), image, time.perf_counter(), Fraction(25))


def decoded(path) -> int:
    """Frames of a file, decoded: a torn or unindexed file raises here."""
    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(video=0))


def test_a_full_disk_leaves_videos_that_play_to_their_last_whole_fragment(small_disk):
    disk = small_disk("3m")
    writer = VideoWriter(str(disk / "cam.mp4"), VideoOutputConfig(), low_space=free_bytes(str(disk)) - 1_000_000)
    writer.room.check_s = 0  # the free space looked at every frame
    rng = np.random.default_rng(0)
    given = 0
    with pytest.raises(OSError) as e:
        for seq in range(10**4):
            given += 1
            writer.write(noise(seq, rng))
    assert e.value.errno == errno.ENOSPC
    lost = writer.abandon()
    plain, fragmented = decoded(disk / "cam.mp4"), decoded(disk / "cam.part1.mp4")
    assert plain > 50 and fragmented > 50  # the plain one finished with room to spare; the rest went on
    assert plain + fragmented + lost == given and 0 < lost < 25 + 5  # about a fragment (1 s) and the encoder's delay


def test_a_torn_fragment_is_cut_off_and_an_empty_file_removed(tmp_path):
    path = tmp_path / "cam.mp4"
    with av.open(str(path), "w", options={"movflags": "frag_keyframe+empty_moov+default_base_moof"}) as c:
        stream = c.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = 160, 120, "yuv420p"
        rng = np.random.default_rng(1)
        for seq in range(60):  # a keyframe every 10 frames: a fragment each
            frame = av.VideoFrame.from_ndarray(rng.integers(0, 255, (120, 160, 3), np.uint8), format="bgr24")
            frame.pts = seq
            frame.pict_type = av.video.frame.PictureType.I if seq % 10 == 0 else av.video.frame.PictureType.NONE
            c.mux(stream.encode(frame))
        c.mux(stream.encode(None))
    whole = whole_fragments_end(str(path))
    with open(path, "r+b") as f:
        f.truncate(whole - 1000)  # the last fragment torn
    assert cut_to_whole_fragments(str(path)) == decoded(path) == 50
    with open(path, "r+b") as f:
        f.truncate(900)  # only the header: nothing plays
    assert cut_to_whole_fragments(str(path)) == 0 and not path.exists()
