"""Model output layouts and NMS."""
