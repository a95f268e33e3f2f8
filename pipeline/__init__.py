"""Real-time multi-camera video analytics on ONNX Runtime."""
from pipeline.allocator import one_arena

__version__ = "0.1.0"

one_arena()  # before any thread of the run allocates: see pipeline.allocator
