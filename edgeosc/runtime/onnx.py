"""Load, validate and run exported .onnx files in onnxruntime, with errors that name the file."""
from __future__ import annotations

import warnings
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
    """An onnxruntime CPU session over a validated file; call it with features [batch, frames, coeffs].

    A file with ai.edgeosc::OscillatorAttention nodes runs them in edgeosc's custom-op library (runtime/ort_op.py)
    where it supports them (custom_op None, the default; `self.custom_op` says whether it does); where it does not, or
    where the library does not build, onnxruntime inlines the nodes' ONNX function, with a one-line warning. custom_op
    False always inlines the function (stock onnxruntime), True refuses (OnnxModelError) what the library cannot run.
    """

    def __init__(self, path: str | Path, optimize: bool = True, threads: int = 1,
                 optimized_model: str | Path | None = None, custom_op: bool | None = None):
        import onnxruntime as ort
        self.path = Path(path)
        model = load_onnx(self.path)

        def session(library: Path | None):
            opts = ort.SessionOptions()
            opts.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                             else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
            opts.intra_op_num_threads = opts.inter_op_num_threads = threads
            opts.log_severity_level = 3  # errors only
            if optimized_model is not None:  # what onnxruntime runs after its graph transformations
                opts.optimized_model_filepath = str(optimized_model)
            if library is not None:
                opts.register_custom_ops_library(str(library))
            return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])

        library, reason = self._op_library(model) if custom_op is not False else (None, None)
        self.session = None
        if library is not None:
            try:
                self.session = session(library)
            except Exception as e:  # the kernel refused a node, or onnxruntime the library
                library, reason = None, f"onnxruntime refuses its library ({_first_line(e)})"
        if reason is not None:
            if custom_op:
                raise OnnxModelError(f"{self.path}: edgeosc's OscillatorAttention kernel cannot run it: {reason}")
            warnings.warn(f"{self.path}: onnxruntime inlines OscillatorAttention's ONNX function: {reason}",
                          stacklevel=2)
        self.custom_op = library is not None
        if self.session is None:
            try:
                self.session = session(None)
            except Exception as e:
                raise OnnxModelError(f"{self.path}: onnxruntime cannot load it ({_first_line(e)})") from None
        self.shape = self.session.get_inputs()[0].shape  # e.g. ['batch', 49, 40]

    @staticmethod
    def _op_library(model: onnx.ModelProto) -> tuple[Path | None, str | None]:
        """(the OscillatorAttention library, None) for a model holding the op that it runs; (None, why not) for one
        it does not run; (None, None) for a model without the op."""
        from . import ort_op
        if not ort_op.holds_op(model):
            return None, None
        reason = ort_op.unsupported(model)
        if reason is not None:
            return None, reason
        try:
            return ort_op.build(), None
        except Exception as e:  # no compiler, or a failed build
            return None, f"its library does not build ({_first_line(e, last=True)})"

    def __call__(self, features) -> np.ndarray:
        x = np.asarray(features, dtype=np.float32)
        fixed = [d if isinstance(d, int) else None for d in self.shape]
        if x.ndim != len(fixed) or any(d is not None and d != n for d, n in zip(fixed, x.shape)):
            want = "[" + ", ".join(str(d) for d in self.shape) + "]"
            raise OnnxModelError(f"{self.path}: input {INPUT!r} has shape {tuple(x.shape)}, the model expects {want}")
        return self.session.run([OUTPUT], {INPUT: x})[0]


def _first_line(e: Exception, last: bool = False) -> str:
    """An exception's first (or last) non-empty line, cut to 200 characters."""
    lines = [line for line in str(e).splitlines() if line.strip()] or [type(e).__name__]
    return lines[-1 if last else 0].strip()[:200]
