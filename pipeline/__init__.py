"""Real-time multi-camera video analytics on ONNX Runtime."""
__version__ = "0.1.0"
