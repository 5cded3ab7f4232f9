"""Interpreter-agnostic .tflite runner: numpy plus whichever TFLite interpreter is installed, never torch."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import custom_op
from .tflite_file import ModelFileError, check_tflite

__all__ = ["ModelFileError", "InterpreterUnavailable", "TensorInfo", "Runner", "available_interpreters", "load"]

# preference order: LiteRT is the maintained runtime, tflite-runtime 2.14 the frozen one, TFLM the MCU one
PREFERENCE = ("ai-edge-litert", "tflite-runtime", "tflite-micro")
MICRO_MISSING = {"ATAN2"}  # builtins TFLite Micro has no kernel for ("Didn't find op for builtin opcode")
# builtins whose int8 kernel only ai-edge-litert has (tflite-runtime 2.14: "Type INT8 is unsupported by op Log";
# TFLite Micro: float only): int8_npu.tflite's log tables (export/tflite/twin.py)
INT8_LITERT_ONLY = {"LOG"}
_MODULES = {"ai-edge-litert": "ai_edge_litert.interpreter", "tflite-runtime": "tflite_runtime.interpreter",
            "tflite-micro": "tflite_micro"}
# a stream export's tensors (export/tflite/stream.py): one frame in, each state as an input and its next value out
FRAME, STATE_IN, STATE_OUT = "frame", "state:", "state_next:"
ALIASES = {"litert": "ai-edge-litert", "ai_edge_litert": "ai-edge-litert", "tflrt": "tflite-runtime",
           "tflite_runtime": "tflite-runtime", "tflm": "tflite-micro", "tflite_micro": "tflite-micro",
           "micro": "tflite-micro"}


class InterpreterUnavailable(RuntimeError):
    """The requested TFLite interpreter is not installed or cannot take the request."""


def _module(name: str):
    try:
        return importlib.import_module(_MODULES[name])
    except ImportError:
        return None


def available_interpreters() -> list[str]:
    """Installed interpreters, in preference order."""
    return [n for n in PREFERENCE if _module(n) is not None]


OP_INTERPRETERS = ("ai-edge-litert", "tflite-runtime")  # EdgeOscAttention: a delegate there, a registered op here


def interpreters_for(path: str | Path) -> list[str]:
    """The installed interpreters that run this .tflite: ai-edge-litert and tflite-runtime for a file with the
    EdgeOscAttention op (its kernel as a delegate, or registered; TFLite Micro's Python package takes neither, its
    firmware compiles the op in), all but TFLite Micro for a file with a builtin it lacks (MICRO_MISSING),
    ai-edge-litert alone for an int8 file with a builtin only its kernels take in int8 (INT8_LITERT_ONLY)."""
    info, names = check_tflite(path), available_interpreters()
    if info["custom_ops"]:
        return [n for n in names if n in OP_INTERPRETERS and set(info["custom_ops"]) <= {custom_op.OP_NAME}]
    if info["quantized_tensors"] and INT8_LITERT_ONLY & set(info["builtin_ops"]):
        return [n for n in names if n == "ai-edge-litert"]
    if MICRO_MISSING & set(info["builtin_ops"]):
        return [n for n in names if n != "tflite-micro"]
    return names


@dataclass(frozen=True)
class TensorInfo:
    """A graph input/output: shape, dtype and (per-tensor or per-channel) quantization."""
    name: str
    shape: tuple
    dtype: np.dtype
    scale: tuple = ()
    zero_point: tuple = ()

    @property
    def quantized(self) -> bool:
        return np.issubdtype(self.dtype, np.integer) and len(self.scale) > 0

    def quantize(self, x) -> np.ndarray:
        """Float -> this tensor's dtype: round half to even (np.round), clip to the integer range."""
        if not self.quantized:
            return np.asarray(x, self.dtype)
        info = np.iinfo(self.dtype)
        q = np.round(np.asarray(x, np.float64) / self.scale[0]) + self.zero_point[0]
        return np.clip(q, info.min, info.max).astype(self.dtype)

    def dequantize(self, q) -> np.ndarray:
        if not self.quantized:
            return np.asarray(q, np.float32) if np.issubdtype(np.asarray(q).dtype, np.floating) else np.asarray(q)
        return ((np.asarray(q, np.float64) - self.zero_point[0]) * self.scale[0]).astype(np.float32)


def _info(t: dict) -> TensorInfo:
    if t["dtype"] is None:
        raise ModelFileError(f"graph tensor {t['name']!r} has unsupported type {t['type']}")
    return TensorInfo(t["name"], tuple(t["shape"]), np.dtype(t["dtype"]), tuple(t["scale"]), tuple(t["zero_point"]))


class _TFLiteBackend:
    """ai-edge-litert and tflite-runtime share the tf.lite.Interpreter API."""

    def __init__(self, mod, data, custom_ops, xnnpack, num_threads, delegates=()):
        kw = dict(model_content=data, num_threads=num_threads)
        if not xnnpack:  # builtin kernels only: int8 results then match TFLM more often (see docs)
            kw["experimental_op_resolver_type"] = mod.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        if delegates:
            kw["experimental_delegates"] = list(delegates)
        if custom_ops:
            self.it = mod.InterpreterWithCustomOps(custom_op_registerers=list(custom_ops), **kw)
        else:
            self.it = mod.Interpreter(**kw)
        self.it.allocate_tensors()
        self._in = [d["index"] for d in self.it.get_input_details()]
        self._out = [d["index"] for d in self.it.get_output_details()]

    def run(self, xs):
        for i, x in zip(self._in, xs):
            self.it.set_tensor(i, x)
        self.it.invoke()
        return [self.it.get_tensor(i) for i in self._out]


class _MicroBackend:
    """TFLM: from_bytes + set_input/invoke/get_output, with a fixed tensor arena."""

    def __init__(self, mod, data, arena_size, n_out):
        self.it = mod.runtime.Interpreter.from_bytes(data, arena_size=arena_size)
        self.n_out = n_out

    def run(self, xs):
        for i, x in enumerate(xs):
            self.it.set_input(x, i)
        self.it.invoke()
        return [np.array(self.it.get_output(i)) for i in range(self.n_out)]


class Runner:
    """One loaded model. Models with batch 1 run a batch of B by looping B single-sample invocations."""

    def __init__(self, path: str, interpreter: str, backend, info: dict):
        self.path, self.interpreter, self._backend, self.info = path, interpreter, backend, info
        sg = info["subgraphs"][0]
        self.inputs = [_info(t) for t in sg["inputs"]]
        self.outputs = [_info(t) for t in sg["outputs"]]

    @property
    def name(self) -> str:
        return f"{Path(self.path).name} [{self.interpreter}]"

    @property
    def input_shape(self) -> tuple:
        return self.inputs[0].shape

    @property
    def output_shape(self) -> tuple:
        return self.outputs[0].shape

    def __repr__(self) -> str:
        shapes = lambda ts: [t.shape for t in ts]  # noqa: E731
        return f"Runner({self.name}, inputs={shapes(self.inputs)}, outputs={shapes(self.outputs)})"

    def _batches(self, xs) -> int:
        """Number of loop iterations: 0 when xs match the model shapes exactly, else the batch size B."""
        exact = all(x.shape == t.shape for x, t in zip(xs, self.inputs))
        if exact:
            return 0
        b = {x.shape[0] if x.ndim else None for x in xs}
        if len(b) == 1 and all(t.shape[:1] == (1,) and x.shape[1:] == t.shape[1:] for x, t in zip(xs, self.inputs)):
            return b.pop()
        raise ValueError(f"{self.name}: inputs {[x.shape for x in xs]} do not match model inputs "
                         f"{[t.shape for t in self.inputs]} (or [B, ...] for a batch-1 model)")

    def run_raw(self, *xs):
        """Run on arrays already in the model's input dtypes; returns raw outputs (one array or a list)."""
        if len(xs) != len(self.inputs):
            raise ValueError(f"{self.name}: expected {len(self.inputs)} inputs, got {len(xs)}")
        xs = [np.asarray(x, t.dtype) for x, t in zip(xs, self.inputs)]
        n = self._batches(xs)
        if n == 0:
            outs = self._backend.run(xs)
        else:
            per = [self._backend.run([x[i:i + 1] for x in xs]) for i in range(n)]
            outs = [np.concatenate([p[k] for p in per], axis=0) for k in range(len(self.outputs))]
        return outs[0] if len(outs) == 1 else outs

    def run(self, *xs):
        """Float in, float out: quantizes int8/int16 inputs and dequantizes outputs with their scale/zero point."""
        raw = self.run_raw(*[t.quantize(x) for x, t in zip(xs, self.inputs)])
        raw = [raw] if len(self.outputs) == 1 else raw
        outs = [t.dequantize(r) for r, t in zip(raw, self.outputs)]
        return outs[0] if len(outs) == 1 else outs

    __call__ = run


def _resolve(interpreter: str | None, custom_ops, op: bool = False) -> str:
    if interpreter is not None:
        name = ALIASES.get(interpreter, interpreter)
        if name not in _MODULES:
            raise InterpreterUnavailable(f"unknown interpreter {interpreter!r}; choose from {list(PREFERENCE)}")
        if _module(name) is None:
            raise InterpreterUnavailable(f"interpreter {name!r} is not installed (pip install {name}); "
                                         f"installed: {available_interpreters()}")
        return name
    names = available_interpreters()
    if custom_ops or op:
        names = [n for n in names if n in (OP_INTERPRETERS if op else ("tflite-runtime",))]
    if not names:
        raise InterpreterUnavailable("custom_ops need tflite-runtime, which is not installed" if custom_ops else
                                     f"{custom_op.OP_NAME} needs ai-edge-litert or tflite-runtime" if op else
                                     "no TFLite interpreter installed (pip install ai-edge-litert)")
    return names[0]


def load(path, interpreter: str | None = None, custom_ops=None, xnnpack: bool = True,
         arena_size: int | None = None, num_threads: int | None = None) -> Runner:
    """Check the file in Python, then load it into the named (or first available) interpreter.

    custom_ops: tflite-runtime registerers (symbol names or callables receiving the op resolver's address);
    a model whose only custom op is EdgeOscAttention gets its kernel (runtime.custom_op) without asking: registered
    in tflite-runtime, as a delegate in ai-edge-litert.
    xnnpack=False disables LiteRT/tflite-runtime's default XNNPACK delegate (builtin kernels only).
    arena_size: TFLM tensor arena in bytes (default from the model's activation sizes).
    """
    path = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ModelFileError(f"{path}: cannot read: {e}") from None
    info = check_tflite(data, name=path)  # in Python, before any native code sees the bytes
    op = custom_ops is None and bool(info["custom_ops"]) and set(info["custom_ops"]) <= {custom_op.OP_NAME}
    name, delegates = _resolve(interpreter, custom_ops, op), ()
    if op and name == "tflite-runtime":
        custom_ops = [custom_op.register]
    elif op and name == "ai-edge-litert":
        delegates = [custom_op.delegate()]
    elif op:
        raise InterpreterUnavailable(f"{path}: {name} can neither register nor delegate the custom op "
                                     f"{custom_op.OP_NAME} (its firmware compiles it in); run int8.tflite, builtin "
                                     "ops only, there")
    if custom_ops and name != "tflite-runtime":
        raise InterpreterUnavailable(f"{path}: " + (
            f"the model uses custom op(s) {info['custom_ops']}, which only tflite-runtime runs (kernels registered "
            f"from Python), not {name}" if info["custom_ops"] else
            f"custom_ops are only supported with tflite-runtime, not {name}"))
    if info["custom_ops"] and not custom_ops and not delegates:
        raise InterpreterUnavailable(f"{path}: model uses custom op(s) {info['custom_ops']}; "
                                     "pass custom_ops=[...] registerers (tflite-runtime only)")
    int8_only = sorted(INT8_LITERT_ONLY & set(info["builtin_ops"])) if info["quantized_tensors"] else []
    if int8_only and name != "ai-edge-litert":
        raise InterpreterUnavailable(f"{path}: int8 {', '.join(int8_only)} runs in ai-edge-litert only ({name} has no "
                                     "int8 kernel for it); an int8_npu.tflite is for Vela, its int8.tflite for the CPU")
    mod = _module(name)
    if name == "tflite-micro":
        act = max(sg["activation_bytes"] for sg in info["subgraphs"])
        arena = arena_size or max(10 * len(data), 2 * act + (64 << 10))
        backend = _MicroBackend(mod, data, arena, len(info["subgraphs"][0]["outputs"]))
    else:
        try:
            backend = _TFLiteBackend(mod, data, custom_ops, xnnpack, num_threads, delegates)
        except (RuntimeError, ValueError) as e:  # a graph the interpreter (or the op's kernel) refuses to prepare
            raise ModelFileError(f"{path}: {name} cannot prepare it: {str(e).strip().splitlines()[0]}") from None
    return Runner(path, name, backend, info)

