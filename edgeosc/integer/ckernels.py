"""The int8 attention cores of firmware_models/kernels called through ctypes (built by cbuild)."""
from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np

from ..cbuild import CORE_SOURCES, build_shared
from . import linear as L, reference as R
from . import schema as S



class Requant(ctypes.Structure):
    _fields_ = [("multiplier", ctypes.c_int32), ("shift", ctypes.c_int32)]


_i32 = ctypes.c_int32
_p8 = ctypes.POINTER(ctypes.c_int8)
CTYPES = {"int32": _i32, "int8*": _p8, "int32*": ctypes.POINTER(_i32), "Requant": Requant}


def mirror(core: S.Core) -> type:
    """The ctypes mirror of a core's C struct, generated from its schema (edgeosc/integer/schema.py)."""
    return type(core.struct.removeprefix("Edgeosc"), (ctypes.Structure,),
                {"_fields_": [(f.name, CTYPES[f.ctype]) for f in core.fields],
                 "__doc__": f"Mirror of {core.struct} (edgeosc_attention.h), made from schema.{core.struct}."})


MIRRORS = {core.struct: mirror(core) for core in S.CORES}
OscParams, GateParams, SoftmaxParams, LinearParams = (MIRRORS[c.struct] for c in S.CORES)


class LinearKey(ctypes.Structure):
    """EdgeoscLinearKey: one key of one head for edgeosc_linear_update (the caller keeps k, v and r alive)."""
    _fields_ = [("k", _p8), ("v", _p8), ("r", _p8), ("gate", _i32), ("sign", _i32)]


def linear_key(k: np.ndarray, v: np.ndarray, r: np.ndarray, gate: int, sign: int = 1) -> LinearKey:
    return LinearKey(_ptr(k), _ptr(v), _ptr(r), int(gate), int(sign))


def make(core: S.Core, **values):
    """A mirror instance from its fields by name (all of them: schema.Core.ordered checks)."""
    return MIRRORS[core.struct](**core.ordered(values))


@lru_cache(maxsize=None)
def library() -> ctypes.CDLL:
    """The compiled cores, built on first use."""
    lib = ctypes.CDLL(str(build_shared(CORE_SOURCES, "edgeosc_kernels")))
    lib.edgeosc_oscillator_core_int8.argtypes = [ctypes.POINTER(OscParams)] + [_p8] * 6
    lib.edgeosc_softmax_core_int8.argtypes = [ctypes.POINTER(SoftmaxParams)] + [_p8] * 5
    lib.edgeosc_linear_core_int8.argtypes = [ctypes.POINTER(LinearParams)] + [_p8] * 6 + [ctypes.POINTER(_i32)]
    lib.edgeosc_linear_stream_int8.argtypes = [ctypes.POINTER(LinearParams)] + [_p8] * 6 + \
        [ctypes.POINTER(_i32)] * 2 + [_p8]
    lib.edgeosc_linear_stream_int8.restype = ctypes.c_int
    lib.edgeosc_turn_anchor.argtypes = [_p8, ctypes.c_uint32, _p8]
    lib.edgeosc_linear_update.argtypes = [ctypes.POINTER(LinearParams), ctypes.POINTER(_i32),
                                          ctypes.POINTER(LinearKey), ctypes.POINTER(LinearKey)]
    lib.edgeosc_linear_query.argtypes = [ctypes.POINTER(LinearParams), ctypes.POINTER(_i32), _p8, _p8]
    for f in (lib.edgeosc_oscillator_core_int8, lib.edgeosc_softmax_core_int8, lib.edgeosc_linear_core_int8):
        f.restype = ctypes.c_int
    lib.edgeosc_mbqm_mode.argtypes = [_i32, _i32, ctypes.c_int, ctypes.c_int]
    lib.edgeosc_mbqm_mode.restype = _i32
    lib.edgeosc_l2norm_row_int8.argtypes = [_p8, ctypes.c_int, _i32, _p8]
    lib.edgeosc_softmax_row_int8.argtypes = [_p8, ctypes.c_int, _i32, _i32, _i32, _p8]
    return lib


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(_p8)


def _p32(a: np.ndarray):
    return a.ctypes.data_as(ctypes.POINTER(_i32))


def _int8(x, shape=None) -> np.ndarray:
    a = np.ascontiguousarray(x, dtype=np.int8)
    if shape is not None and a.shape != tuple(shape):
        raise ValueError(f"expected shape {tuple(shape)}, got {a.shape}")
    return a


def _rq(rq) -> Requant:
    return Requant(rq[0], rq[1])


def osc_params(p: R.OscQuant, heads: int, tokens: int, d_head: int, d_osc: int, d_value: int) -> tuple[OscParams, list]:
    """EdgeoscOscParams from an integer.reference.OscQuant (plus the arrays it points into, to keep alive)."""
    f = p.fields(heads, tokens, d_head, d_osc, d_value)
    tables = [_int8(f[n], (256,)) for n in S.OSC.role("table")]
    f.update(zip(S.OSC.role("table"), map(_ptr, tables)))
    f.update({n: _rq(f[n]) for n in S.OSC.role("requant")})
    return make(S.OSC, **f), tables


def softmax_params(p: R.SoftmaxQuant, heads: int, tokens: int, d_head: int, d_value: int,
                   exp_lut: np.ndarray | None = None) -> SoftmaxParams:
    """EdgeoscSoftmaxParams from an integer.reference.SoftmaxQuant (exp_lut: int32 [256], kept alive by the caller)."""
    f = p.fields(heads, tokens, d_head, d_value, None if exp_lut is None else exp_lut.ctypes.data_as(ctypes.POINTER(_i32)))
    f.update(rq_qk=_rq(f["rq_qk"]), rq_out=_rq(f["rq_out"]))
    return make(S.SOFTMAX, **f)


def linear_params(p: L.LinearQuant, heads: int, tokens: int, d_head: int, d_value: int,
                  t0: int = 0) -> tuple[LinearParams, np.ndarray | None]:
    """EdgeoscLinearParams from an integer.linear.LinearQuant, and the turn array it points to (keep it alive)."""
    f = p.fields(heads, tokens, d_head, d_value, t0)
    turn = None if p.turn is None else np.array(p.turn, np.int32)
    return make(S.LINEAR, **{**f, "rq_out": _rq(f["rq_out"]), "turn": None if turn is None else _p32(turn)}), turn


def _heads(q, k, v, *more):
    """int8 [H, T, *] arrays that agree on H and T (and k's last dim on q's)."""
    q = _int8(q)
    H, T, dh = q.shape
    return [q, _int8(k, (H, T, dh))] + [_int8(x, (H, T, np.shape(x)[-1])) for x in (v, *more)]


def oscillator_core(p: R.OscQuant, q, k, v, r) -> np.ndarray:
    """Runs edgeosc_oscillator_core_int8 on [H, T, *] int8 arrays: out [H, T, dv]."""
    q, k, v, r = _heads(q, k, v, r)
    (H, T, dh), dv, dr = q.shape, v.shape[-1], r.shape[-1]
    c, _tables = osc_params(p, H, T, dh, dr, dv)  # _tables: keeps the pointed-to arrays alive
    out = np.empty((H, T, dv), np.int8)
    scratch = np.empty(T + 2 * dr, np.int8)  # EDGEOSC_OSC_SCRATCH_BYTES
    if library().edgeosc_oscillator_core_int8(ctypes.byref(c), *map(_ptr, (q, k, v, r, out, scratch))):
        raise ValueError("edgeosc_oscillator_core_int8 rejected its parameters")
    return out


def softmax_core(p: R.SoftmaxQuant, q, k, v, lut: bool = False) -> np.ndarray:
    """Runs edgeosc_softmax_core_int8 on [H, T, *] int8 arrays: out [H, T, dv]; lut: exps from a table."""
    q, k, v = _heads(q, k, v)
    (H, T, dh), dv = q.shape, v.shape[-1]
    table = R.softmax_exp_table(p.beta_multiplier, p.beta_left_shift, p.diff_min).astype(np.int32) if lut else None
    c = softmax_params(p, H, T, dh, dv, table)
    out = np.empty((H, T, dv), np.int8)
    scratch = np.empty(T, np.int8)
    if library().edgeosc_softmax_core_int8(ctypes.byref(c), *map(_ptr, (q, k, v, out, scratch))):
        raise ValueError("edgeosc_softmax_core_int8 rejected its parameters")
    return out


def linear_core(p: L.LinearQuant, q, k, v, r, g=None, t0: int = 0) -> np.ndarray:
    """Runs edgeosc_linear_core_int8 on [H, T, *] int8 arrays (r [H, T, 2], g [H, T] or None): out [H, T, dv]."""
    q, k, v, r = _heads(q, k, v, r)
    (H, T, dh), dv = q.shape, v.shape[-1]
    gate = None if g is None else _int8(g, (H, T))
    c, _turn = linear_params(p, H, T, dh, dv, t0)
    out = np.empty((H, T, dv), np.int8)
    state = np.empty(L.linear_state_words(dh, dv, p.p), np.int32)
    if library().edgeosc_linear_core_int8(ctypes.byref(c), *map(_ptr, (q, k, v, r)),
                                          None if gate is None else _ptr(gate), _ptr(out), _p32(state)):
        raise ValueError("edgeosc_linear_core_int8 rejected its parameters")
    return out


def linear_stream(p: L.LinearQuant, state: L.LinearStream, q, k, v, r, g=None) -> tuple[np.ndarray, L.LinearStream]:
    """Runs edgeosc_linear_stream_int8: more frames [H, T, *] of a stream -> (out [H, T, dv], the new state)."""
    q, k, v, r = _heads(q, k, v, r)
    (H, T, dh), dv = q.shape, v.shape[-1]
    gate = None if g is None else _int8(g, (H, T))
    c, _turn = linear_params(p, H, T, dh, dv)
    new = L.LinearStream(*(np.array(a, dtype, copy=True) for a, dtype in
                           ((state.clock, np.int32), (state.sums, np.int32), (state.kept, np.int8))))
    if new.kept.shape != (H, p.window, dh + dv + 3) or new.sums.shape != (H, L.linear_state_words(dh, dv, p.p)):
        raise ValueError(f"stream state {new.kept.shape} / {new.sums.shape} is not this core's")
    out = np.empty((H, T, dv), np.int8)
    if library().edgeosc_linear_stream_int8(ctypes.byref(c), *map(_ptr, (q, k, v, r)),
                                            None if gate is None else _ptr(gate), _ptr(out), _p32(new.clock),
                                            _p32(new.sums), _ptr(new.kept)):
        raise ValueError("edgeosc_linear_stream_int8 rejected its parameters or state")
    return out, new


def mbqm(x, multiplier: int, shift: int, mode: str = "away") -> np.ndarray:
    """edgeosc_mbqm_mode elementwise (for tests)."""
    f, m = library().edgeosc_mbqm_mode, S.c_rounding(mode)
    return np.array([f(int(xi), multiplier, shift, m) for xi in np.ravel(x)], np.int64).reshape(np.shape(x))


def rows(fn: str, x, *args) -> np.ndarray:
    """Applies edgeosc_l2norm_row_int8 / edgeosc_softmax_row_int8 to every last-axis row (for tests)."""
    x = _int8(x)
    flat = x.reshape(-1, x.shape[-1])
    out = np.empty_like(flat)
    f = getattr(library(), f"edgeosc_{fn}_row_int8")
    for i in range(flat.shape[0]):
        f(_ptr(flat[i]), flat.shape[1], *args, _ptr(out[i]))
    return out.reshape(x.shape)
