"""One builtin op, one call: the kernels of edgeosc_ops.h with TFLite Micro's parameters (CONV_2D, DEPTHWISE_CONV_2D,
AVERAGE_POOL_2D, FULLY_CONNECTED, ADD, SUB, MUL, BATCH_MATMUL, L2_NORMALIZATION, SOFTMAX, CONCATENATION, GATHER,
SLICE, TRANSPOSE; RESHAPE and a PAD folded into its convolution cost nothing)."""
from __future__ import annotations

import numpy as np

from ...integer import reference as R
from ...runtime.tflite_file import schema
from .calls import Array, Only, Ref, Struct
from .graph import Op, Tensor, UnsupportedGraph
from .multipliers import act_range, channel_rq, double_rq, dsp_requant, product_rq, rq, softmax_params
from .packing import depthwise3x3_packs, depthwise_scratch_words, fast_scratch_words, pack_depthwise3x3, weight_fields


def broadcast(a: tuple, b: tuple, out: tuple) -> dict:
    """EdgeoscBroadcast of two shapes onto out (right-aligned, padded to 4 dims)."""
    if len(out) > 4:
        raise UnsupportedGraph(f"broadcast of rank {len(out)} > 4")

    def strides(shape):
        shape = (1,) * (4 - len(shape)) + tuple(shape)
        dense = np.cumprod((1,) + shape[:0:-1])[::-1]
        return [0 if d == 1 else int(s) for d, s in zip(shape, dense)]

    return dict(dims=[1] * (4 - len(out)) + list(out), stride_a=strides(a), stride_b=strides(b))


class BuiltinOps:
    """Lowering's one-op calls (export/c/ops.py): single(op) dispatches to op_<kind>, which returns its call(s), or None
    where the op needs none (its output an alias of its input's storage, or folded into the op that reads it)."""

    def single(self, op: Op):
        handler = getattr(self, f"op_{op.kind.lower()}", None)
        if handler is None:
            hint = "" if op.kind not in ("SUM", "RSQRT") else (  # int8_npu.tflite's unit vectors (builder.unit_vector)
                ": an int8_npu.tflite (its unit vectors for the Ethos-U NPUs)? Generate from int8.tflite beside it "
                "(or int8_custom.tflite, or the QAT checkpoint)")
            raise UnsupportedGraph(f"op {op.index} {op.kind} ({self.label(op)}) has no firmware kernel{hint}")
        for i in op.outputs:
            if self.t(i).dtype != np.int8:
                raise UnsupportedGraph(f"op {op.index} {op.kind}: only int8 outputs are supported, "
                                       f"{self.t(i).name} is {self.t(i).dtype}")
        return handler(op)

    def op_reshape(self, op: Op):
        self.alias[op.outputs[0]] = self.alias.get(op.inputs[0], op.inputs[0])
        self.done.add(op.index)
        return None

    def window(self, op: Op, x: Tensor, out: Tensor, k_h: int, k_w: int, dilation: bool = True) -> dict:
        """Geometry of a windowed op on one NHWC image (CONV_2D, DEPTHWISE_CONV_2D, AVERAGE_POOL_2D): sizes,
        strides, dilations and TFLite's padding (ComputePaddingWithOffset), the output shape checked."""
        o, kind = op.options, op.kind
        if len(x.shape) != 4 or len(out.shape) != 4 or x.shape[0] != 1 or out.shape[0] != 1:
            raise UnsupportedGraph(f"{out.name}: {kind} needs one NHWC image (batch 1), got {x.shape} -> {out.shape}")
        if o.padding not in (schema.Padding.SAME, schema.Padding.VALID):
            raise UnsupportedGraph(f"{out.name}: {kind} padding {o.padding} is neither SAME nor VALID")
        dil = (o.dilationHFactor, o.dilationWFactor) if dilation else (1, 1)
        if min(o.strideH, o.strideW, *dil, k_h, k_w) < 1:
            raise UnsupportedGraph(f"{out.name}: {kind} strides, dilations and kernel sizes must be >= 1")
        pads = []
        for size, k, stride, d, osize in ((x.shape[1], k_h, o.strideH, dil[0], out.shape[1]),
                                          (x.shape[2], k_w, o.strideW, dil[1], out.shape[2])):
            want = -(-size // stride) if o.padding == schema.Padding.SAME else (size - (k - 1) * d - 1) // stride + 1
            if osize != want or want < 1:
                raise UnsupportedGraph(f"{out.name}: {kind} output size {osize} does not follow from input {size}, "
                                       f"kernel {k}, stride {stride}, dilation {d} and its padding (expected {want})")
            total = (osize - 1) * stride + (k - 1) * d + 1 - size
            pads.append(max(total, 0) // 2 if o.padding == schema.Padding.SAME else 0)
        return dict(in_h=x.shape[1], in_w=x.shape[2], out_h=out.shape[1], out_w=out.shape[2], k_h=k_h, k_w=k_w,
                    stride_h=o.strideH, stride_w=o.strideW, pad_top=pads[0], pad_left=pads[1],
                    **(dict(dil_h=dil[0], dil_w=dil[1]) if dilation else {}))

    def conv_params(self, op: Op, k_h: int, k_w: int, pack: bool) -> tuple[Tensor, Tensor, Struct]:
        """EdgeoscConvParams of CONV_2D / DEPTHWISE_CONV_2D (constant symmetric weights); pack: weight_fields'."""
        x, w, out = self.t(op.inputs[0]), self.t(op.inputs[1]), self.t(op.outputs[0])
        bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
        if w.data is None or np.any(w.zp) or len(w.shape) != 4:
            raise UnsupportedGraph(f"{out.name}: {op.kind} needs constant symmetric 4-D weights")
        lo, hi = act_range(out, op.options.fusedActivationFunction)
        geo = self.window(op, x, out, k_h, k_w)
        if x.index in self.folded_pad:  # read the PAD's input, its zero rows as the convolution's padding
            src, top, left = self.folded_pad[x.index]
            x = self.t(src)
            geo.update(in_h=x.shape[1], in_w=x.shape[2], pad_top=top, pad_left=left)
        p = Struct("EdgeoscConvParams", dict(
            **geo, in_c=x.shape[3], out_c=out.shape[3], zp_in=x.z, zp_out=out.z,
            act_min=lo, act_max=hi, **weight_fields(w, bias, x.z, out.name, self.g.tensors, pack=pack,
                                                    w16=out.shape[1] * out.shape[2] == 1),
            rq=channel_rq(x, w, out, out.name, conv=True)))
        return x, out, p

    def op_conv_2d(self, op: Op):
        w = self.t(op.inputs[1])
        x, out, p = self.conv_params(op, *w.shape[1:3], pack=True)
        if w.shape[0] != out.shape[3] or w.shape[3] != x.shape[3]:
            raise UnsupportedGraph(f"{out.name}: CONV_2D weights {w.shape} do not map {x.shape} to {out.shape}")
        K = w.shape[1] * w.shape[2] * w.shape[3]  # EDGEOSC_CONV_SCRATCH_WORDS: the fast paths' scratch
        return self.emit("edgeosc_conv2d_int8", [p, Ref(x.index), Ref(out.index), "scratch32"], [op], out.name,
                         scratch=4 * (fast_scratch_words(K, w.shape[0], p.fields["rq"]) + K))

    def op_depthwise_conv_2d(self, op: Op):
        w, out = self.t(op.inputs[1]), self.t(op.outputs[0])
        if len(w.shape) != 4 or w.shape[0] != 1:
            raise UnsupportedGraph(f"{out.name}: DEPTHWISE_CONV_2D weights must be [1, kh, kw, out_c], got {w.shape}")
        x, out, p = self.conv_params(op, *w.shape[1:3], pack=False)
        c_in, c_out = x.shape[3], out.shape[3]
        if w.shape[3] != c_out or c_out % c_in or op.options.depthMultiplier not in (0, c_out // c_in):
            raise UnsupportedGraph(f"{out.name}: DEPTHWISE_CONV_2D maps {c_in} channels to {c_out} with weights "
                                   f"{w.shape} and depth multiplier {op.options.depthMultiplier}: out_c must be the "
                                   "weights' last dim and a multiple of in_c")
        f = p.fields
        bias = None if f["bias"] is None else self.g.tensors[f["bias"].tensor].data
        rq = f["rq"].fields  # the planes take a shift of 0 too, which the other DSP kernels cannot
        dsp = dsp_requant(rq["multiplier"].values, rq["shift"].values, 0)
        if depthwise3x3_packs(f, c_in, c_out, f["act_min"], f["act_max"], dsp, w.data, bias, x.z):
            rq["dsp"] = Array(dsp, f"{out.name}_dsp")
            f.update(weights=Only(f["weights"], False), bias=Only(f["bias"], False),
                     packed=Only(Array(pack_depthwise3x3(w.data, bias, x.z), f"{out.name}_packed"), True))
        return self.emit("edgeosc_depthwise_conv_int8", [p, Ref(x.index), Ref(out.index), "scratch32"], [op],
                         out.name, scratch=4 * depthwise_scratch_words(*out.shape[1:3]))

    def op_average_pool_2d(self, op: Op):
        x, out, o = self.t(op.inputs[0]), self.t(op.outputs[0]), op.options
        if (x.s, x.z) != (out.s, out.z) or x.dtype != np.int8:
            raise UnsupportedGraph(f"{out.name}: int8 AVERAGE_POOL_2D needs the input's scale and zero point on its "
                                   "output")
        if x.shape[3] != out.shape[3]:
            raise UnsupportedGraph(f"{out.name}: AVERAGE_POOL_2D changes the channels {x.shape} -> {out.shape}")
        geo = self.window(op, x, out, o.filterHeight, o.filterWidth, dilation=False)
        if o.padding == schema.Padding.SAME and (geo["pad_top"] >= o.filterHeight or geo["pad_left"] >= o.filterWidth):
            raise UnsupportedGraph(f"{out.name}: AVERAGE_POOL_2D has windows wholly in the padding")
        lo, hi = act_range(out, o.fusedActivationFunction)
        p = Struct("EdgeoscAvgPoolParams", dict(**{k: v for k, v in geo.items()}, channels=x.shape[3], act_min=lo,
                                                act_max=hi))
        return self.emit("edgeosc_avg_pool_int8", [p, Ref(x.index), Ref(out.index)], [op], out.name)

    def op_fully_connected(self, op: Op):
        x, w, out = self.t(op.inputs[0]), self.t(op.inputs[1]), self.t(op.outputs[0])
        bias = op.inputs[2] if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
        if w.data is None or np.any(w.zp) or w.data.ndim != 2:
            raise UnsupportedGraph(f"{out.name}: FULLY_CONNECTED needs constant symmetric 2-D weights")
        lo, hi = act_range(out, op.options.fusedActivationFunction)
        rows = x.size // w.shape[1]
        p = Struct("EdgeoscFcParams", dict(
            rows=rows, depth=w.shape[1], units=w.shape[0], zp_in=x.z, zp_out=out.z, act_min=lo, act_max=hi,
            **weight_fields(w, bias, x.z, out.name, self.g.tensors, w16=rows == 1), rq=channel_rq(x, w, out, out.name)))
        return self.emit("edgeosc_fc_int8", [p, Ref(x.index), Ref(out.index), "scratch32"], [op], out.name,
                         scratch=4 * fast_scratch_words(w.shape[1], w.shape[0], p.fields["rq"]))

    def binary(self, op: Op):
        a, b, out = self.t(op.inputs[0]), self.t(op.inputs[1]), self.t(op.outputs[0])
        if a.dtype != np.int8 or b.dtype != np.int8:
            raise UnsupportedGraph(f"{out.name}: {op.kind} needs int8 inputs")
        lo, hi = act_range(out, op.options.fusedActivationFunction)
        return a, b, out, dict(shape=broadcast(a.shape, b.shape, out.shape), zp_a=a.z, zp_b=b.z, zp_out=out.z,
                               act_min=lo, act_max=hi)

    def op_add(self, op: Op, subtract: int = 0):
        a, b, out, f = self.binary(op)
        left_shift = 20
        real_a, real_b, real_out = R.add_multipliers(a.s, b.s, out.s, left_shift)
        p = Struct("EdgeoscAddParams", dict(
            **f, left_shift=left_shift, subtract=subtract, rq_a=rq(real_a), rq_b=rq(real_b), rq_out=rq(real_out)))
        return self.emit("edgeosc_add_int8", [p, Ref(a.index), Ref(b.index), Ref(out.index)], [op], out.name)

    def op_sub(self, op: Op):
        return self.op_add(op, subtract=1)

    def op_mul(self, op: Op):
        a, b, out, f = self.binary(op)
        p = Struct("EdgeoscMulParams", dict(**f, rq=double_rq(a.s, b.s, out.s)))
        return self.emit("edgeosc_mul_int8", [p, Ref(a.index), Ref(b.index), Ref(out.index)], [op], out.name)

    def op_batch_matmul(self, op: Op):
        a, b, out = self.t(op.inputs[0]), self.t(op.inputs[1]), self.t(op.outputs[0])
        adj_y = int(op.options.adjY)
        if op.options.adjX:
            raise UnsupportedGraph(f"{out.name}: BATCH_MATMUL with adj_x")
        ba, bb = int(np.prod(a.shape[:-2])), int(np.prod(b.shape[:-2]))
        if ba != bb and 1 not in (ba, bb):
            raise UnsupportedGraph(f"{out.name}: BATCH_MATMUL batch shapes {a.shape}, {b.shape}")
        p = Struct("EdgeoscBatchMatmulParams", dict(
            batch=max(ba, bb), batch_a=ba, batch_b=bb, rows=a.shape[-2], depth=a.shape[-1],
            cols=b.shape[-2] if adj_y else b.shape[-1], adj_y=adj_y, zp_a=a.z, zp_b=b.z, zp_out=out.z,
            rq=product_rq(a.s, b.s, out.s)))
        return self.emit("edgeosc_batch_matmul_int8", [p, Ref(a.index), Ref(b.index), Ref(out.index)], [op], out.name)

    def op_l2_normalization(self, op: Op):
        x, out = self.t(op.inputs[0]), self.t(op.outputs[0])
        if (out.s, out.z) != (np.float32(R.SCALE_UNIT), 0):
            raise UnsupportedGraph(f"{out.name}: int8 L2_NORMALIZATION needs output (1/128, 0)")
        d = x.shape[-1]
        return self.emit("edgeosc_l2norm_int8", [x.size // d, d, x.z, Ref(x.index), Ref(out.index)], [op], out.name)

    def op_softmax(self, op: Op):
        x, out = self.t(op.inputs[0]), self.t(op.outputs[0])
        table = Array(R.softmax_exp_table(*softmax_params(x, out, op)), f"{out.name}_exp")
        d = x.shape[-1]
        return self.emit("edgeosc_softmax_int8", [x.size // d, d, table, Ref(x.index), Ref(out.index)], [op], out.name)

    def op_concatenation(self, op: Op):
        """A copy of each input into its part of the output (the same quantization throughout)."""
        out, ins = self.t(op.outputs[0]), [self.t(i) for i in op.inputs]
        axis = op.options.axis % len(out.shape)
        if any((x.s, x.z, x.dtype) != (out.s, out.z, out.dtype) for x in ins) or op.options.fusedActivationFunction:
            raise UnsupportedGraph(f"{out.name}: CONCATENATION needs every input quantized as its output, no activation")
        rows, inner = int(np.prod(out.shape[:axis])), int(np.prod(out.shape[axis + 1:]))
        calls, at = [], 0
        for x in ins:
            n = x.shape[axis] * inner
            calls.append(self.emit("edgeosc_copy_rows_int8", [rows, n, n, out.shape[axis] * inner, Ref(x.index),
                                                              Ref(out.index, at)], [op], out.name))
            at += n
        return calls

    def op_gather(self, op: Op):
        """GATHER with constant indices in range (the lookup tables are their own pattern, lut): row copies."""
        x, index, out = self.t(op.inputs[0]), self.t(op.inputs[1]), self.t(op.outputs[0])
        axis = getattr(op.options, "axis", 0) % len(x.shape)
        if index.data is None or (x.s, x.z) != (out.s, out.z) or np.any(index.data < 0) or \
                np.any(index.data >= x.shape[axis]) or getattr(op.options, "batchDims", 0):
            raise UnsupportedGraph(f"{out.name}: GATHER needs constant indices within the axis, no batch dims")
        outer, inner = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis + 1:]))
        return self.emit("edgeosc_gather_int8", [outer, x.shape[axis], inner, index.size,
                                                 Array(index.data.astype(np.int32).ravel(), f"{out.name}_index"),
                                                 Ref(x.index), Ref(out.index)], [op], out.name)

    def op_slice(self, op: Op):
        """x[begin : begin + size] as the TRANSPOSE kernel's strided copy from the box's first element."""
        x, begin, size, out = (self.t(i) for i in (*op.inputs, op.outputs[0]))
        if begin.data is None or size.data is None or len(x.shape) > 4:
            raise UnsupportedGraph(f"{out.name}: SLICE needs a constant begin and size, <= 4 dims")
        if (x.s, x.z) != (out.s, out.z):
            raise UnsupportedGraph(f"{out.name}: SLICE changes the quantization")
        dense = np.cumprod((1,) + x.shape[:0:-1])[::-1]
        pad = 4 - len(x.shape)
        p = Struct("EdgeoscTransposeParams", dict(out_dims=[1] * pad + list(out.shape),
                                                  in_strides=[0] * pad + [int(d) for d in dense]))
        start = int(np.dot(begin.data.astype(np.int64), dense))
        return self.emit("edgeosc_transpose_int8", [p, Ref(x.index, start), Ref(out.index)], [op], out.name)

    def op_pad(self, op: Op):
        """PAD of an NHWC image's height or width with its zero point, read by one VALID CONV_2D: folded into the
        convolution's padding (op_conv_2d); no call of its own."""
        x, pads, out = self.t(op.inputs[0]), self.t(op.inputs[1]), self.t(op.outputs[0])
        conv = self.g.sole_consumer(op.outputs[0], "CONV_2D")
        p = None if pads.data is None else pads.data.reshape(-1, 2)
        if conv is None or conv.inputs[0] != op.outputs[0] or conv.options.padding != schema.Padding.VALID or \
                p is None or len(x.shape) != 4 or p[0].any() or p[3].any() or (x.s, x.z) != (out.s, out.z):
            raise UnsupportedGraph(f"{out.name}: PAD is lowered only into a VALID CONV_2D that alone reads it, on "
                                   "the image's height and width")
        self.folded_pad[op.outputs[0]] = (op.inputs[0], int(p[1][0]), int(p[2][0]))
        self.done.add(op.index)
        return None

    def op_transpose(self, op: Op):
        x, perm, out = self.t(op.inputs[0]), self.t(op.inputs[1]), self.t(op.outputs[0])
        if perm.data is None or len(x.shape) > 4:
            raise UnsupportedGraph(f"{out.name}: TRANSPOSE needs a constant permutation of <= 4 dims")
        moved = [int(d) for d in perm.data if x.shape[int(d)] > 1]
        if moved == sorted(moved) and op.outputs[0] not in self.alias:  # only size-1 dims move: the same bytes
            return self.op_reshape(op)
        pad = 4 - len(x.shape)
        dense = np.cumprod((1,) + x.shape[:0:-1])[::-1]
        p = Struct("EdgeoscTransposeParams", dict(out_dims=[1] * pad + list(out.shape),
                                                  in_strides=[0] * pad + [int(dense[i]) for i in perm.data]))
        return self.emit("edgeosc_transpose_int8", [p, Ref(x.index), Ref(out.index)], [op], out.name)
