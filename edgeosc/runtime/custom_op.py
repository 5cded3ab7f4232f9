"""The EdgeOscAttention TFLite custom op's kernel: build it, register it with tflite-runtime, or hand it to
ai-edge-litert as a delegate (which cannot register ops from Python but loads delegates):

    from tflite_runtime.interpreter import InterpreterWithCustomOps
    it = InterpreterWithCustomOps(model_path=p, custom_op_registerers=[custom_op.register])
    from ai_edge_litert.interpreter import Interpreter
    it = Interpreter(model_path=p, experimental_delegates=[custom_op.delegate()])

The kernel (export/tflite_op/edgeosc_tflite_op.c around firmware_models/kernels) reads the options that
edgeosc.export.tflite.custom_op writes, and is bit-exact with the builtin decomposition run by the
interpreter named in the "rounding" option (default tflite-runtime).
"""
from __future__ import annotations

import ctypes
from functools import lru_cache
from pathlib import Path

from ..cbuild import CORE_SOURCES, TFLITE_OP, build_shared

OP_NAME = "EdgeOscAttention"
GLUE = TFLITE_OP / "edgeosc_tflite_op.c"
DELEGATE = TFLITE_OP / "edgeosc_tflite_delegate.c"  # the same op as a delegate (export/tflite_op/tflite_abi.h)
ADD_CUSTOM = "_ZN6tflite17MutableOpResolver9AddCustomEPKcPK18TfLiteRegistrationi"
_NAME = OP_NAME.encode()  # AddCustom copies it, but keep the bytes alive anyway


def build() -> Path:
    """Path of the op's shared library (compiled on first use, cached by source hash)."""
    return build_shared([*CORE_SOURCES, GLUE, DELEGATE], "edgeosc_tflite_op", include_dirs=(TFLITE_OP,), libs=("-lm",))


@lru_cache(maxsize=None)
def _library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(build()))
    lib.edgeosc_tflite_registration.restype = ctypes.c_void_p
    return lib


@lru_cache(maxsize=None)
def _add_custom():
    import tflite_runtime.interpreter as tfl

    wrapper = next(Path(tfl.__file__).parent.glob("_pywrap_tensorflow_interpreter_wrapper*.so"))
    f = getattr(ctypes.CDLL(str(wrapper)), ADD_CUSTOM)
    f.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int]
    f.restype = None
    return f


def register(resolver_address: int) -> None:
    """Custom-op registerer for tflite-runtime: adds EdgeOscAttention (version 1) to the op resolver."""
    _add_custom()(ctypes.c_void_p(resolver_address), _NAME, _library().edgeosc_tflite_registration(), 1)


def delegate():
    """A fresh ai-edge-litert delegate that runs every EdgeOscAttention node of a model with this kernel (one per
    interpreter: the interpreter keeps it alive)."""
    from ai_edge_litert.interpreter import load_delegate

    return load_delegate(str(build()))
