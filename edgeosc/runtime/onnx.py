"""Load, validate and run exported .onnx files in onnxruntime, with errors that name the file."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

INPUT, OUTPUT = "features", "logits"


class OnnxModelError(ValueError):
    """An .onnx file, or an input for it, that cannot be used; the message names the file."""


def _tensors(model: onnx.ModelProto):
    """Every constant tensor: initializers and Constant nodes of the graph and of its functions."""
    yield from model.graph.initializer
    for node in [*model.graph.node, *(n for f in model.functions for n in f.node)]:
        if node.op_type == "Constant":
            yield from (a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR)


def load_onnx(path: str | Path) -> onnx.ModelProto:
    """Read an edgeosc .onnx file: parses, passes onnx.checker (full), finite weights, features -> logits."""
    path = Path(path)
    if not path.is_file():
        raise OnnxModelError(f"{path}: no such ONNX file")
    try:
        model = onnx.load(path)
    except Exception as e:  # protobuf raises DecodeError (and others) for truncated or foreign files
        raise OnnxModelError(f"{path}: not a readable ONNX model ({type(e).__name__}: {str(e)[:120]})") from None
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:
        raise OnnxModelError(f"{path}: fails the ONNX checker ({str(e).splitlines()[0][:200]})") from None
    bad = [t.name or "(constant)" for t in _tensors(model)
           if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)
           and not np.isfinite(numpy_helper.to_array(t)).all()]
    if bad:
        raise OnnxModelError(f"{path}: non-finite weights in {', '.join(bad[:3])}")
    inits = {t.name for t in model.graph.initializer}
    inputs = [i.name for i in model.graph.input if i.name not in inits]
    outputs = [o.name for o in model.graph.output]
    if inputs != [INPUT] or outputs != [OUTPUT]:
        raise OnnxModelError(f"{path}: expected input {INPUT!r} and output {OUTPUT!r}, found {inputs} -> {outputs}")
    return model


class OnnxRunner:
    """An onnxruntime CPU session over a validated file; call it with features [batch, frames, coeffs]."""

    def __init__(self, path: str | Path, optimize: bool = True, threads: int = 1,
                 optimized_model: str | Path | None = None):
        import onnxruntime as ort
        self.path = Path(path)
        model = load_onnx(self.path)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                         else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
        opts.intra_op_num_threads = opts.inter_op_num_threads = threads
        opts.log_severity_level = 3  # errors only
        if optimized_model is not None:  # what onnxruntime runs after its graph transformations
            opts.optimized_model_filepath = str(optimized_model)
        try:
            self.session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        except Exception as e:
            raise OnnxModelError(f"{self.path}: onnxruntime cannot load it ({str(e).splitlines()[0][:200]})") from None
        self.shape = self.session.get_inputs()[0].shape  # e.g. ['batch', 49, 40]

    def __call__(self, features) -> np.ndarray:
        x = np.asarray(features, dtype=np.float32)
        fixed = [d if isinstance(d, int) else None for d in self.shape]
        if x.ndim != len(fixed) or any(d is not None and d != n for d, n in zip(fixed, x.shape)):
            want = "[" + ", ".join(str(d) for d in self.shape) + "]"
            raise OnnxModelError(f"{self.path}: input {INPUT!r} has shape {tuple(x.shape)}, the model expects {want}")
        return self.session.run([OUTPUT], {INPUT: x})[0]
