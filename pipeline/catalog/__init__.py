"""Known models and sample clips (`entries`), and how a fresh machine obtains them (`fetch`)."""
from pipeline.catalog.entries import (MODELS, MODELS_DIR, SAMPLES, SAMPLES_DIR, SHARED, VARIANTS, ModelEntry,
                                      Precision, PublicFile)
from pipeline.catalog.fetch import FetchError, Fetcher, Needs, fetch_all, fetch_sample, needs_of_config, sha256_of

__all__ = ["MODELS", "MODELS_DIR", "SAMPLES", "SAMPLES_DIR", "SHARED", "VARIANTS", "ModelEntry", "Precision",
           "PublicFile", "FetchError", "Fetcher", "Needs", "fetch_all", "fetch_sample", "needs_of_config", "sha256_of"]
