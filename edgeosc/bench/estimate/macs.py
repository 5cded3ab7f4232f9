"""Multiply-accumulates of one inference as the .tflite states them (what cycles per MAC divide by)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from .build import ATTENTION

MACS_COUNTED = ("multiply-accumulates of CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED and BATCH_MATMUL as the "
                ".tflite states them (and of the EdgeOscAttention custom op's matmuls, or its linear core's state "
                "updates and queries), including the oscillator's ones-column "
                "row sum and the mean pool's one-valued FULLY_CONNECTED; not counted: elementwise MUL/ADD/SUB, "
                "L2 normalisation, softmax, table lookups, requantization")


def count_macs(tflite: str | Path) -> dict:
    """MACs of one inference (see MACS_COUNTED): total, inside the fused attention cores, by op kind."""
    from ...export.c.graph import CUSTOM_OSC, read_graph
    from ...export.c.ops import lower
    g = read_graph(Path(tflite).read_bytes())
    fused = {o for call in lower(g)[0] if call.fn in ATTENTION for o in call.ops}
    total, attention, by_kind = 0, 0, {}
    for op in g.ops:
        t = lambda i: g.tensors[op.inputs[i]]  # noqa: E731
        out = g.tensors[op.outputs[0]]
        if op.kind == "CONV_2D":
            n = out.size * int(np.prod(t(1).shape[1:]))  # per output: k_h k_w in_c
        elif op.kind == "DEPTHWISE_CONV_2D":
            n = out.size * t(1).shape[1] * t(1).shape[2]  # per output: k_h k_w
        elif op.kind == "FULLY_CONNECTED":
            n = out.size * t(1).shape[1]  # per output: depth
        elif op.kind == "BATCH_MATMUL":
            n = out.size * t(0).shape[-1]
        elif op.kind == CUSTOM_OSC:
            from flatbuffers import flexbuffers

            from ...integer.linear import linear_state_words
            q, v, r = t(0), t(2), t(3)
            H, T = int(np.prod(q.shape[:-2])), q.shape[-2]
            o = flexbuffers.Loads(op.custom) if op.custom else {}
            if o.get("form") == "linear":  # a MAC per state word and key (update), and per query
                n = H * T * 2 * linear_state_words(q.shape[-1], v.shape[-1], int(o["p"]))
            else:  # qk, h = wn r, zr, the row sum, a v: per (head, query, key)
                n = H * T * T * (q.shape[-1] + 2 * r.shape[-1] + 1 + v.shape[-1])
        else:
            continue
        total += n
        attention += n if op.index in fused else 0
        by_kind[op.kind] = by_kind.get(op.kind, 0) + n
    return dict(total=int(total), attention=int(attention), by_kind=by_kind, counted=MACS_COUNTED)


def find_tflite(fw: Path, info: dict, given) -> Path | None:
    """The .tflite the folder was generated from (its sha256 in firmware.json must match)."""
    for p in [given, fw / "int8.tflite", fw / "int8_custom.tflite", info.get("source")]:
        if p and Path(p).is_file():
            digest = hashlib.sha256(Path(p).read_bytes()).hexdigest()
            if given is None and info.get("sha256") not in (None, digest):
                continue
            return Path(p)
    return None
