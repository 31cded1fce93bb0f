"""Reading model files: TVMScript, ONNX and TFLite, with the model's names."""
