"""What an ONNX file says about itself, and precision variants of it.

- `metadata`: the file's inputs, outputs and metadata, parsed safely (`ast.literal_eval`);
- `defaults`: the settings a model config may leave out because the file supplies them;
- `inspect`: all of that explained, with the layout checked on a real picture;
- `optimize` / `agreement`: fp16 and int8 variants, and how closely they agree with the original.

`metadata` and `defaults` sit on the config's floor (the config reads them); the others
run models and decoders and sit above the engines.
"""
