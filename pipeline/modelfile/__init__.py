"""The model tools of `pipeline models`: what an ONNX file says about itself, and
precision variants of it.

- `inspect`: the file explained (`pipeline.config.model_file` reads it safely,
  `pipeline.config.model_defaults` says what it supplies), with the layout checked on a
  real picture;
- `optimize` / `agreement`: fp16 and int8 variants, and how closely they agree with the original.

Like the benchmark, these run models, decoders and the start-up checks: they sit on the
command line's floor.
"""
