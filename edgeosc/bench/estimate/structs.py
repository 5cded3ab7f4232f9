"""The parameters the drivers take (firmware_models/harness/core_driver.c, kernel_driver.c), as ctypes structs laid
out for the emulated core and handed to it as byte buffers.

The attention cores take their own parameter structs: the ctypes mirrors of edgeosc/integer/ckernels.py (made from
edgeosc/integer/schema.py), laid out for the target by for_target (pointers 4 bytes on Thumb, 8 on AArch64, written
null: the driver sets them from its other arguments). The builtin kernels take their integers in a struct of the
driver's own (Bench* in kernel_driver.c, int32 fields only, mirrored below by name; tests/test_estimate.py checks
both sides agree), their arrays as arguments."""
from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np

from .. import cycles as C


def _int32s(*names: str) -> list[tuple[str, type]]:
    return [(n, ctypes.c_int32) for n in names]


class BenchFc(ctypes.Structure):
    """FULLY_CONNECTED's integers (kernel_driver.c edgeosc_bench_fc)."""
    _fields_ = _int32s("rows", "depth", "units", "zp_in", "zp_out", "act_min", "act_max", "per_channel")


class BenchConv(ctypes.Structure):
    """CONV_2D's and DEPTHWISE_CONV_2D's integers (edgeosc_bench_conv; depthwise: weights [1, k_h, k_w, out_c])."""
    _fields_ = _int32s("in_h", "in_w", "in_c", "out_h", "out_w", "out_c", "k_h", "k_w", "stride_h", "stride_w",
                       "dil_h", "dil_w", "pad_top", "pad_left", "zp_in", "zp_out", "act_min", "act_max", "depthwise")


class BenchL2Norm(ctypes.Structure):
    """L2_NORMALIZATION's integers (edgeosc_bench_l2norm): rows of depth values, their zero point."""
    _fields_ = _int32s("rows", "depth", "zp")


class BenchAdd(ctypes.Structure):
    """ADD's and SUB's integers (edgeosc_bench_add): the broadcast shape, zero points, clamp, the sign."""
    _fields_ = [("dims", ctypes.c_int32 * 4), ("stride_a", ctypes.c_int32 * 4), ("stride_b", ctypes.c_int32 * 4),
                *_int32s("zp_a", "zp_b", "zp_out", "act_min", "act_max", "subtract")]


DRIVER_STRUCTS = (BenchFc, BenchConv, BenchL2Norm, BenchAdd)


def buffer(value: ctypes.Structure) -> np.ndarray:
    """A struct's bytes as an emulator buffer."""
    return np.frombuffer(bytes(value), np.uint8).copy()


@lru_cache(maxsize=None)
def _layout(mirror: type, pointer: type) -> type:
    """mirror with each pointer field an integer of the target's pointer size (nested structs likewise)."""
    def kind(t):
        if issubclass(t, ctypes._Pointer):
            return pointer
        return _layout(t, pointer) if issubclass(t, ctypes.Structure) else t
    return type(mirror.__name__, (ctypes.Structure,), {"_fields_": [(n, kind(t)) for n, t in mirror._fields_]})


def _copy_ints(src: ctypes.Structure, dst: ctypes.Structure) -> None:
    for name, t in src._fields_:
        if issubclass(t, ctypes.Structure):
            _copy_ints(getattr(src, name), getattr(dst, name))
        elif not issubclass(t, ctypes._Pointer):
            setattr(dst, name, getattr(src, name))


def target_layout(mirror: type, core: str) -> type:
    """A ckernels mirror (a ctypes Structure) as `core` lays its C struct out: pointers as 4- or 8-byte integers."""
    return _layout(mirror, ctypes.c_uint32 if C.CORES[core].isa == "thumb" else ctypes.c_uint64)


def for_target(params: ctypes.Structure, core: str) -> np.ndarray:
    """A ckernels mirror instance as `core` lays its C struct out (pointers null), as an emulator buffer."""
    out = target_layout(type(params), core)()
    _copy_ints(params, out)
    return buffer(out)
