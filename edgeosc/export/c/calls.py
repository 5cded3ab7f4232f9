"""What the lowering hands the emitter (export/c/__init__.py): kernel calls and their arguments."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Array:
    """A constant array in flash (multipliers, shifts, exp tables); its C name is made from name."""
    values: np.ndarray
    name: str


@dataclass
class Struct:
    """A kernel's parameter struct: emitted static const in the settings header, passed by address; label: its
    name there when it is one of a group's (else the call's)."""
    ctype: str
    fields: dict
    label: str = ""


@dataclass
class Ref:
    """A tensor's data: a constant array, or its place in the arena; offset: bytes into it."""
    tensor: int
    offset: int = 0


@dataclass
class Only:
    """A parameter one kind of build reads: those that read packed weights (packed, EDGEOSC_PACKED: the DSP path)
    or the others; the other kind gets NULL, and an array only it reads is left out of its build."""
    value: Array | Ref | None
    packed: bool


@dataclass
class Slot:
    """A ring's next slot: an int32 in the arena, kept between runs (a streaming model's)."""
    ring: int


@dataclass
class Sums:
    """A summed ring's running sums (Lowering.ring): `count` int32 in the arena, kept between runs, reset to `start`
    (the ring's slots times its zero point: the sum of a ring at its zero point)."""
    ring: int
    count: int
    start: int


@dataclass
class Call:
    """One kernel call fn(args...); args are Struct, Ref, Array, int, "scratch" (bytes) or "scratch32" (int32 words)."""
    fn: str
    args: list
    label: str
    scratch: int = 0
    ops: list = field(default_factory=list)  # the TFLite op indices it replaces
