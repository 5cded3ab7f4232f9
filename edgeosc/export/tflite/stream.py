"""int8 TFLite of a streaming network (ModelConfig.window > 0), its state as extra inputs and outputs.

Two files of one QAT network, equal bit for bit (tests/test_stream_export.py):
  stream_int8.tflite   one frame: "frame" [1, coeffs] and the state -> "logits" [1, classes] and the next state.
                       Every state tensor is an input "state:<name>" and an output "state_next:<name>" of one shape;
                       a stream starts with each at its zero point (real 0; the int32 ones at 0) and feeds each
                       output back as the next frame's input (kws_streaming's external state):
                         stem            the two frames before this one (the causal stem's receptive field)
                         block<i>/attn/clock  the oscillator's linear core (EdgeOscAttention option stream: the
                         block<i>/attn/sums   frame number, its sums over the window's keys, the keys kept to
                         block<i>/attn/kept   leave them)
                         block<i>/attn/keys   softmax's key/value cache, [H, window, d] (before the first frame:
                         block<i>/attn/values zeros, which its queries read as keys too)
                         pool            the last `window` outputs of the final norm, [1, d, window]
  window_int8.tflite   a recording: "features" [1, frames, coeffs] -> "logits" [1, frames, classes], every frame's
                       (the stem PAD-ded on the left, the core causal over a window, the pooling a banded sum).
The pooling is the sum of the window's frames over `window`: at a stream's first frames it counts the frames
before the start as zeros (the float network divides by the frames seen; the same from frame `window` on).
"""
from __future__ import annotations

import numpy as np
import torch

from ...integer.linear import linear_state_words, turn_steps
from ...models.attention import OscillatorAttention, SoftmaxAttention
from ...runtime import FRAME, STATE_IN, STATE_OUT
from . import CUSTOM_OP, OUTPUT, Graph, _scale, custom_op


class StreamGraph(Graph):
    """The int8 graph of a QAT streaming network: one frame (frames None) or a recording of `frames` frames."""

    def __init__(self, qat, frames: int | None = None):
        net = qat.net
        if not net.window:
            raise ValueError("a stream export needs a streaming network (trained with --window)")
        for block in net.blocks:
            if isinstance(block.attn, SoftmaxAttention) and block.attn.slopes is not None:
                raise ValueError("the int8 stream export has no distance bias (ModelConfig.distance_bias) yet: its "
                                 "scores would need a quantization point after the bias")
        super().__init__(net, qat, custom_core=True)
        self.frames, self.states = frames, []  # the states' names, in input order

    def state_in(self, name: str, shape, dtype, **quant) -> int:
        """A state input "state:<name>" of this shape, dtype and quantization (scale, zero_point); the op that
        computes the next state names its output "state_next:<name>"."""
        self.states.append(name)
        return self.b.input(STATE_IN + name, shape, dtype, **quant)

    # ---- the layers that stream --------------------------------------------------------------------
    def stem(self, x: int) -> int:
        """The causal stem (this frame and the two before it) as a VALID CONV_2D -> [1, T, d]."""
        b, cfg = self.b, self.net.cfg
        if self.frames is None:
            (s,), (z,) = b.quant(x)
            past = self.state_in("stem", [1, 2, cfg.n_coeffs], np.int8, scale=s, zero_point=z)
            x = b.concatenation([past, x], 1, name="stem/frames")  # [1, 3, C]
            b.slice(x, [0, 1, 0], [1, 2, cfg.n_coeffs], name=STATE_OUT + "stem")
            x = b.reshape(x, [1, 1, 3, cfg.n_coeffs], name="stem/nhwc")
        else:  # two frames of zeros (the zero point) before the first; the firmware folds them into the conv
            x = b.reshape(x, [1, 1, self.frames, cfg.n_coeffs], name="stem/nhwc")
            x = b.pad(x, [(0, 0), (0, 0), (2, 0), (0, 0)], name="stem/causal")
        # straight onto the "embed" point, which QAT places right after the stem's own output quantizer
        x = self.int8_conv(x, self.net.stem, "VALID", self.q(self.net.quant, "embed"), "embed")
        return b.reshape(x, [1, -1, self.net.cfg.d_model], name="stem/tokens")

    def key_gate(self, x: int, attn: OscillatorAttention, label: str) -> int | None:
        """A stream's gate: sigmoid(g_raw) per key, a table, [H, 1, T]."""
        if attn.gate is None:
            return None
        raw = self.linear(x, attn.gate, self.q(attn.quant, "g_raw"), label=f"{label}/g_raw")
        raw = self.b.transpose(raw, [2, 0, 1], name=f"{label}/g_keys")
        return self.table(raw, torch.sigmoid, attn.quant, "g", f"{label}/g")

    def custom_oscillator_core(self, qh, kh, vh, r, attn: OscillatorAttention, label: str, g: int | None = None):
        b = self.b
        shape = b.shape(qh)[:2] + [b.shape(vh)[-1]]
        s_out, z_out = self.q(attn.quant, "out")
        out = b.tensor(f"{label}/out", shape, np.int8, scale=s_out, zero_point=z_out)
        turn = None if attn.omega is None else turn_steps(attn.omega.detach().numpy())
        options = dict(form="linear", p=attn.p, causal=1, window=attn.window, eps=attn.eps, d_osc=attn.d_osc,
                       positive=attn.positive, heads=attn.heads, **({} if turn is None else dict(turn=turn)))
        ins, outs = [qh, kh, vh, r] + ([g] if g is not None else []), [out]
        if self.frames is None:  # one step of the stream: its state in and out
            H, dh, dv = attn.heads, attn.d_h, b.shape(vh)[-1]
            raw = dict(scale=1.0, zero_point=0)  # the kept keys' k, v, turned r and g side by side
            for name, shp, dtype, quant in (("clock", [3], np.int32, {}),
                                            ("sums", [H, linear_state_words(dh, dv, attn.p)], np.int32, {}),
                                            ("kept", [H, attn.window, dh + dv + 3], np.int8, raw)):
                ins.append(self.state_in(f"{label}/{name}", shp, dtype, **quant))
                outs.append(b.tensor(f"{STATE_OUT}{label}/{name}", shp, dtype, **quant))
            options["stream"] = 1
        b.custom(CUSTOM_OP, ins, outs, custom_op.custom_options(**options))
        return out

    def softmax_core(self, qh: int, kh: int, vh: int, attn: SoftmaxAttention, label: str) -> int:
        """Each query against the last `window` keys and values, a key/value cache; before the stream's first frame
        the cache holds zeros (their zero points), which the query reads as keys too, as the pooling counts them.
        One frame: the cache is state, shifted by CONCATENATION and SLICE. A recording: each query's window
        gathered from the keys after window - 1 zeros (GATHER), [H T, window, d], one matmul row each."""
        b, W = self.b, attn.window
        H, T, dh = b.shape(qh)

        def window_of(x: int, name: str) -> int:
            (s,), (z,) = b.quant(x)
            d = b.shape(x)[-1]
            if self.frames is None:
                past = self.state_in(f"{label}/{name}", [H, W, d], np.int8, scale=s, zero_point=z)
                both = b.concatenation([past, x], 1, name=f"{label}/{name}_and_new")
                return b.slice(both, [0, 1, 0], [H, W, d], name=f"{STATE_OUT}{label}/{name}")
            zeros = b.const(f"{label}/{name}_before", np.full((H, W - 1, d), z, np.int8), np.int8, scale=s,
                            zero_point=z)
            padded = b.concatenation([zeros, x], 1, name=f"{label}/{name}_padded")  # [H, T + W - 1, d]
            index = b.const(f"{label}/{name}_index", (np.arange(T)[:, None] + np.arange(W)).astype(np.int32))
            windows = b.gather(padded, index, axis=1, name=f"{label}/{name}_windows")  # [H, T, W, d]
            return b.reshape(windows, [H * T, W, d], name=f"{label}/{name}_rows")

        keys, values = window_of(kh, "keys"), window_of(vh, "values")
        queries = qh if self.frames is None else b.reshape(qh, [H * T, 1, dh], name=f"{label}/q_rows")
        out = super().softmax_core(queries, keys, values, attn, label)  # [H (T), 1, dv]
        return out if self.frames is None else b.reshape(out, [H, T, -1], name=f"{label}/out_heads")

    def pool(self, y: int) -> int:
        """The mean of the last `window` frames: [1, T, d] -> [1, T, d] (frames) or [1, d] (one frame)."""
        b, W, d = self.b, self.net.window, self.net.cfg.d_model
        q = self.q(self.net.quant, "pool")
        if self.frames is None:
            (s,), (z,) = b.quant(y)
            kept = self.state_in("pool", [1, d, W], np.int8, scale=s, zero_point=z)
            frames = b.concatenation([kept, b.reshape(y, [1, d, 1], name="pool/column")], 2, name="pool/frames")
            nxt = b.slice(frames, [0, 0, 1], [1, d, W], name=STATE_OUT + "pool")
            return b.reshape(self.unit_sum(nxt, q, "pool", 1 / W), [1, d], name="pool/flat")
        T = self.frames
        band = np.tri(T, T, 0, np.int8) - np.tri(T, T, -W, np.int8)  # row i: frames i - W < j <= i
        w = b.const("pool/band", band * 127, np.int8, scale=1 / W / 127)
        x = b.transpose(y, [0, 2, 1], name="pool/time_last")
        x = b.fully_connected(x, w, keep_num_dims=True, q=q, name="pool")
        return b.transpose(x, [0, 2, 1], name="pool/frames")

    # ---- the network -----------------------------------------------------------------------------
    def build(self) -> bytes:
        b, net, cfg = self.b, self.net, self.net.cfg
        s_in, _ = _scale(self.qat.input_quant)
        if self.frames is None:
            x = b.input(FRAME, [1, cfg.n_coeffs], np.int8, scale=s_in, zero_point=0)
            x = b.reshape(x, [1, 1, cfg.n_coeffs], name="frame/row")
        else:
            x = b.input("features", [1, self.frames, cfg.n_coeffs], np.int8, scale=s_in, zero_point=0)
        x = self.stem(x)
        for i, block in enumerate(net.blocks):
            x = self.block(x, block, f"block{i}")
        x = self.pool(self.layer_norm(x, net.norm, "norm"))
        logits = self.linear(x, net.head, _scale(self.qat.output_quant), label=OUTPUT)
        b.tensors[logits].name = OUTPUT
        b.mark_output(logits)
        by_name = {t.name: i for i, t in enumerate(b.tensors)}
        b.mark_output(*(by_name[STATE_OUT + n] for n in self.states))
        return b.to_bytes()


def stream_file(qat) -> bytes:
    """stream_int8.tflite of a QAT streaming network."""
    return StreamGraph(qat).build()


def window_file(qat, frames: int | None = None) -> bytes:
    """window_int8.tflite: the network over a recording of `frames` frames (default the clip length)."""
    return StreamGraph(qat, frames or qat.net.cfg.n_frames).build()
