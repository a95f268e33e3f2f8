"""A decoded picture scaled before its colour conversion agrees with converting first."""
import av
import cv2
import numpy as np
import pytest

from pipeline.pictures import scaled_bgr


@pytest.fixture(scope="module")
def pictures(sample_path) -> list[av.VideoFrame]:
    """Real decoded pictures at 1080p (the sample scaled up: the size the shortcut is for)."""
    out = []
    with av.open(sample_path("vtest.mp4")) as c:
        for i, f in enumerate(c.decode(video=0)):
            if i % 30 == 0:
                out.append(f.reformat(1920, 1080, "yuv420p"))
            if len(out) == 4:
                return out
    return out


def converted_then_scaled(picture: av.VideoFrame, size: tuple[int, int], interpolation: int) -> np.ndarray:
    return cv2.resize(picture.to_ndarray(format="bgr24"), size, interpolation=interpolation)


@pytest.mark.parametrize("size,interpolation", [((416, 234), cv2.INTER_LINEAR), ((415, 233), cv2.INTER_LINEAR),
                                                ((960, 540), cv2.INTER_AREA)])
def test_scaling_the_planes_first_gives_the_pixels_of_converting_first(pictures, size, interpolation):
    for picture in pictures:
        want = converted_then_scaled(picture, size, interpolation).astype(np.int16)
        got = scaled_bgr(picture, *size, interpolation).astype(np.int16)
        assert got.shape == want.shape == (size[1], size[0], 3)
        diff = np.abs(got - want)
        assert diff.mean() < 2.0 and np.percentile(diff, 99) <= 16, (diff.mean(), np.percentile(diff, 99))


def test_the_pictures_colour_space_is_honoured(pictures):
    tagged = av.VideoFrame.from_ndarray(pictures[0].to_ndarray(format="yuv420p"), format="yuv420p")
    tagged.colorspace = 1  # BT.709, as HD cameras tag their streams
    as_709 = converted_then_scaled(tagged, (416, 234), cv2.INTER_LINEAR).astype(np.int16)
    as_601 = converted_then_scaled(pictures[0], (416, 234), cv2.INTER_LINEAR).astype(np.int16)
    got = scaled_bgr(tagged, 416, 234).astype(np.int16)
    assert np.abs(as_709 - as_601).mean() > 1.0  # the tag changes the colours
    assert np.abs(got - as_709).mean() < 0.5 * np.abs(got - as_601).mean()


def test_other_pixel_formats_are_converted_first(pictures):
    nv12 = pictures[0].reformat(format="nv12")  # what a hardware decoder hands over
    want = converted_then_scaled(nv12, (416, 234), cv2.INTER_LINEAR)
    np.testing.assert_array_equal(scaled_bgr(nv12, 416, 234), want)
