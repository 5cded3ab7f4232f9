"""The attention cores' fused calls: the oscillator core's builtin chain or its EdgeOscAttention custom op (direct,
key-gated, linear, a stream's step) and softmax's (qk, SOFTMAX, out), each one call with its parameter struct."""
from __future__ import annotations

import numpy as np

from ...integer import linear as L
from ...integer import reference as R
from ...integer import schema as S
from .calls import Array, Call, Ref, Struct
from .graph import CUSTOM_OSC, Op, Tensor, UnsupportedGraph
from .multipliers import double_rq, product_rq, softmax_params


def osc_rqs(scales: dict, ones_scale: float) -> dict:
    """The oscillator core's rq_* fields as TFLite Micro computes them (step 7 a BATCH_MATMUL or a per-tensor
    FULLY_CONNECTED: both float32(s_c * s_ones) / s_sum there; MUL in double)."""
    return {n: dict(multiplier=r.multiplier, shift=r.shift)
            for n, r in R.osc_requants(scales, ones_scale, "batch_matmul", "tflite-micro").items()}


def gate_params(g: Tensor, s_pow: float, zp_pow: int, s_gated: float, zp_gated: int) -> tuple[Struct, Tensor]:
    """The key gate's part of a fused oscillator call: EdgeoscGateParams of MUL(pow, g) -> gated, and g."""
    return Struct(S.GATE.struct, S.GATE.ordered(dict(zp_pow=zp_pow, zp_gated=zp_gated,
                                                     rq_gate=double_rq(s_pow, g.s, s_gated)))), g


def same_heads(q: Tensor, k: Tensor, *others: Tensor) -> bool:
    """The fused cores' layout: q and k [.., H, T, d], the others [.., H, T, *] with the same leading dims."""
    return len(q.shape) >= 3 and k.shape == q.shape and all(t.shape[:-1] == q.shape[:-1] for t in others)


class AttentionCores:
    """Lowering's fused attention cores (export/c/ops.py): oscillator_core and softmax_core return the call where op
    starts a core, else None (the table lookups of the oscillator's chain come from Patterns)."""

    def sum_step(self, c: int):
        """Step 7: FULLY_CONNECTED(c, ones [1, T]) or BATCH_MATMUL(c, ones [T, 1]): (op, ones) or None."""
        users = [u for u in self.g.consumers(c) if u.kind in ("FULLY_CONNECTED", "BATCH_MATMUL")]
        if c in self.g.outputs or len(users) != 1 or users[0].inputs[0] != c:
            return None
        op = users[0]
        ones = self.t(op.inputs[1])
        if ones.data is None or np.any(ones.data != ones.data.flat[0]) or (len(op.inputs) > 2 and op.inputs[2] >= 0):
            return None
        if op.kind == "BATCH_MATMUL" and (op.options.adjX or op.options.adjY or ones.shape[-1] != 1):
            return None
        if op.kind == "FULLY_CONNECTED" and (ones.shape[0] != 1 or op.options.fusedActivationFunction):
            return None
        return op, ones

    def gate_step(self, c: int):
        """The key gate after the (1 + zr)^p table c: MUL(c, g [.., 1, T] at (1/128, 0)), then unit rows
        (L2_NORMALIZATION): (mul, l2, g) or None."""
        mul = self.g.sole_consumer(c, "MUL")
        l2 = mul and self.g.sole_consumer(mul.outputs[0], "L2_NORMALIZATION")
        if l2 is None or mul.options.fusedActivationFunction:
            return None
        gate, pw = self.t(mul.inputs[1] if mul.inputs[0] == c else mul.inputs[0]), self.t(c)
        if gate.shape != pw.shape[:-2] + (1, pw.shape[-1]) or (gate.s, gate.z) != (np.float32(R.SCALE_UNIT), 0):
            return None
        return mul, l2, gate

    def oscillator_core(self, op: Op):
        """qk = BMM(q, k^T), w = table, wn = L2, h = BMM(wn, r), z = L2, zr = BMM(z, r^T), c = table,
        [key gate: c = L2(MUL(c, g))], sum = ones, inv = table, a = MUL(c, inv), out = BMM(a, v), or the
        EdgeOscAttention custom op."""
        if op.kind == CUSTOM_OSC:
            return self.custom_core(op)
        g = self.g
        if op.kind != "BATCH_MATMUL" or not op.options.adjY or op.options.adjX:
            return None
        plain = lambda o: o is not None and not o.options.adjX and not o.options.adjY  # noqa: E731
        w_chain = self.lut_chain(op.outputs[0])
        if w_chain is None:
            return None
        wn_op = g.sole_consumer(w_chain[2], "L2_NORMALIZATION")
        h_op = wn_op and g.sole_consumer(wn_op.outputs[0], "BATCH_MATMUL")
        if not plain(h_op) or h_op.inputs[0] != wn_op.outputs[0]:
            return None
        z_op = g.sole_consumer(h_op.outputs[0], "L2_NORMALIZATION")
        zr_op = z_op and g.sole_consumer(z_op.outputs[0], "BATCH_MATMUL")
        r = h_op.inputs[1]
        if zr_op is None or zr_op.inputs != [z_op.outputs[0], r] or not zr_op.options.adjY or zr_op.options.adjX:
            return None
        c_chain = self.lut_chain(zr_op.outputs[0])
        if c_chain is None:
            return None
        gate = self.gate_step(c_chain[2])
        c = gate[1].outputs[0] if gate else c_chain[2]
        mul = next((u for u in g.consumers(c) if u.kind == "MUL"), None)
        summ = self.sum_step(c)
        if mul is None or summ is None or c in g.outputs or len(g.consumers(c)) != 2:
            return None
        inv_chain = self.lut_chain(summ[0].outputs[0])
        if inv_chain is None or sorted(mul.inputs) != sorted([c, inv_chain[2]]):
            return None
        out_op = g.sole_consumer(mul.outputs[0], "BATCH_MATMUL")
        if not plain(out_op) or out_op.inputs[0] != mul.outputs[0] or mul.options.fusedActivationFunction:
            return None
        T = self.t
        q, k, v, rt = T(op.inputs[0]), T(op.inputs[1]), T(out_op.inputs[1]), T(r)
        if not same_heads(q, k, v, rt):
            return None
        pts = {n: T(i) for n, i in dict(qk=op.outputs[0], w=w_chain[2], wn=wn_op.outputs[0], h=h_op.outputs[0],
                                        z=z_op.outputs[0], zr=zr_op.outputs[0], c=c, sum=summ[0].outputs[0],
                                        inv=inv_chain[2], a=mul.outputs[0], out=out_op.outputs[0]).items()}
        ops = [op, *w_chain[0], wn_op, h_op, z_op, zr_op, *c_chain[0], *(gate[:2] if gate else ()), summ[0],
               *inv_chain[0], mul, out_op]
        tables = [w_chain[1].index, c_chain[1].index, inv_chain[1].index]
        for n in ("wn", "z", *(("c",) if gate else ())):
            if (pts[n].s, pts[n].z) != (np.float32(R.SCALE_UNIT), 0):
                raise UnsupportedGraph(f"{pts[n].name}: L2_NORMALIZATION output must be (1/128, 0)")
        s = {**{n: t.s for n, t in pts.items()}, **dict(q=q.s, k=k.s, v=v.s, r=rt.s)}
        rqs = osc_rqs(s, summ[1].s)
        zps = {n: pts[n].z for n in (*S.POINTS, "out")}
        gated = None
        if gate:
            pw, prod = T(c_chain[2]), T(gate[0].outputs[0])
            gated = gate_params(gate[2], pw.s, pw.z, prod.s, prod.z)
        return self.core_call(ops, q, k, v, rt, zps, tables, rqs, int(summ[1].data.flat[0]), pts["out"].name, gated)

    def core_call(self, ops, q, k, v, r, zps, tables, rqs, ones, label, gate=None) -> Call:
        """The fused core's call; gate: (its EdgeoscGateParams, the unit gates' tensor) or None."""
        H, T = int(np.prod(q.shape[:-2])), q.shape[-2]
        dr = r.shape[-1]
        fields = dict(heads=H, tokens=T, d_head=q.shape[-1], d_osc=dr, d_value=v.shape[-1],
                      **dict(zip(S.OSC.role("table"), map(Ref, tables))),
                      zp_q=q.z, zp_k=k.z, zp_v=v.z, zp_r=r.z, **{f"zp_{n}": zps[n] for n in zps}, ones=ones,
                      **rqs, **dict.fromkeys(S.OSC.role("rounding"), 0))  # EDGEOSC_ROUND_AWAY (TFLite Micro)
        out = [o for o in ops if o.kind in ("BATCH_MATMUL", CUSTOM_OSC)][-1].outputs[0]
        params = Struct(S.OSC.struct, S.OSC.ordered(fields))
        if gate:
            args = [params, gate[0], *(Ref(t.index) for t in (q, k, v, r, gate[1])), Ref(out), "scratch"]
            return self.emit("edgeosc_oscillator_gated_core_int8", args, ops, label, scratch=T + 2 * dr)
        args = [params, *(Ref(t.index) for t in (q, k, v, r)), Ref(out), "scratch"]
        return self.emit("edgeosc_oscillator_core_int8", args, ops, label, scratch=T + 2 * dr)

    def custom_core(self, op: Op) -> Call:
        """EdgeOscAttention (export/tflite_op): multipliers from its options' scales as the builtin chain's in
        TFLite Micro (the op's "rounding" option names the TFLite interpreter it mimics; firmware follows TFLM)."""
        from flatbuffers import flexbuffers

        o = flexbuffers.Loads(op.custom)
        q, k, v, r = (self.t(i) for i in op.inputs[:4])
        out = self.t(op.outputs[0])
        if o.get("form") == "linear":
            return self.linear_core(op, o, q, k, v, r, out)
        has_gate = "gated_scale" in o  # the key gate: the unit gates are the last input
        points = S.POINTS + (S.GATE_POINTS if has_gate else ())
        s = {p: float(np.float32(o[f"{p}_scale"])) for p in points}
        zp = {p: int(o.get(f"{p}_zero_point", 0)) for p in points}
        zps = {**{p: zp[p] for p in S.POINTS}, "out": out.z}  # the core's own: EdgeoscOscParams fields
        if len(op.inputs) - has_gate == 7:
            tables = op.inputs[4:7]
        else:  # tables in the options: add them as constant tensors
            tables = []
            for name in S.OSC.role("table"):
                data = np.frombuffer(bytes(o[name]), np.int8)
                tables.append(len(self.g.tensors))
                self.g.tensors.append(Tensor(len(self.g.tensors), f"{out.name}/{name}", (256,), np.dtype(np.int8),
                                             np.ones(1, np.float32), np.zeros(1, np.int64), data))
        ones, ones_scale = int(o.get("ones", 1)), float(np.float32(o.get("ones_scale", 1.0)))
        rqs = osc_rqs({**s, **dict(q=q.s, k=k.s, v=v.s, r=r.s, out=out.s)}, ones_scale)
        gated = gate_params(self.t(op.inputs[-1]), s["pow"], zp["pow"], s["gated"], zp["gated"]) if has_gate else None
        return self.core_call([op], q, k, v, r, zps, tables, rqs, ones, out.name, gated)

    def linear_core(self, op: Op, o: dict, q: Tensor, k: Tensor, v: Tensor, r: Tensor, out: Tensor) -> Call:
        """EdgeOscAttention form "linear": the constants the op's Prepare derives (integer.linear.linear_quant_from_scales)."""
        if not same_heads(q, k, v, r) or r.shape[-1] != 2 or (r.s, r.z) != (np.float32(R.SCALE_UNIT), 0):
            raise UnsupportedGraph(f"{out.name}: the linear core needs r [.., H, T, 2] at (1/128, 0)")
        stream = bool(o.get("stream"))
        n_in = len(op.inputs) - 3 * stream
        g = self.t(op.inputs[4]) if n_in == 5 else None
        H, T, dh, dv = int(np.prod(q.shape[:-2])), q.shape[-2], q.shape[-1], v.shape[-1]
        turn = np.frombuffer(bytes(o["turn"]), "<u2") if "turn" in o else None
        if turn is not None and H % len(turn):
            raise UnsupportedGraph(f"{out.name}: {len(turn)} turn rates for {H} heads")
        pq = L.linear_quant_from_scales(dict(q=q.s, k=k.s, v=v.s, out=out.s), dh, int(o["p"]),
                                        dict(q=q.z, k=k.z, v=v.z, g=0 if g is None else g.z, out=out.z),
                                        bool(o.get("causal", False)), int(o.get("window", 0)),
                                        None if turn is None else np.resize(turn, H))
        fields = pq.fields(H, T, dh, dv)
        fields["turn"] = None if turn is None else Array(np.array(pq.turn, np.int32), f"{out.name}/turn")
        params = Struct(S.LINEAR.struct, dict(fields, rq_out=dict(multiplier=pq.rq_out.multiplier, shift=pq.rq_out.shift)))
        args = [params, *(Ref(t.index) for t in (q, k, v, r)), None if g is None else Ref(g.index), Ref(out.index)]
        if stream:  # the state in place: each output is its input's buffer (a graph state pair)
            state = op.inputs[-3:]
            if [self.alias.get(t) for t in op.outputs[1:]] != state:
                raise UnsupportedGraph(f"{out.name}: a stream step's state outputs must be the graph's state outputs "
                                       "of its state inputs (state:<name> -> state_next:<name>)")
            return self.emit("edgeosc_linear_stream_int8", args + [Ref(t) for t in state], [op], out.name)
        return self.emit("edgeosc_linear_core_int8", args + ["scratch32"], [op], out.name,
                         scratch=4 * L.linear_state_words(dh, dv, pq.p))

    def softmax_core(self, op: Op):
        """qk = BMM(q, k^T), a = SOFTMAX(qk), out = BMM(a, v)."""
        if op.kind != "BATCH_MATMUL" or not op.options.adjY or op.options.adjX:
            return None
        sm = self.g.sole_consumer(op.outputs[0], "SOFTMAX")
        out_op = sm and self.g.sole_consumer(sm.outputs[0], "BATCH_MATMUL")
        if not out_op or out_op.inputs[0] != sm.outputs[0] or out_op.options.adjY or out_op.options.adjX:
            return None
        q, k, qk, a, v, out = (self.t(i) for i in (*op.inputs, op.outputs[0], sm.outputs[0], out_op.inputs[1],
                                                    out_op.outputs[0]))
        if not (same_heads(k, k, v) and len(q.shape) == len(k.shape) and q.shape[:-2] == k.shape[:-2]
                and q.shape[-1] == k.shape[-1]):
            return None
        mult, shift, diff_min = softmax_params(qk, a, sm)
        queries = q.shape[-2] if q.shape[-2] != k.shape[-2] else 0  # a stream's query against its cache
        fields = dict(heads=int(np.prod(q.shape[:-2])), tokens=k.shape[-2], d_head=q.shape[-1], d_value=v.shape[-1],
                      queries=queries,
                      zp_q=q.z, zp_k=k.z, zp_v=v.z, zp_qk=qk.z, zp_out=out.z, rq_qk=product_rq(q.s, k.s, qk.s),
                      rq_out=product_rq(a.s, v.s, out.s), beta_multiplier=mult, beta_left_shift=shift,
                      diff_min=diff_min, round_matmul=0,
                      exp_lut=Array(R.softmax_exp_table(mult, shift, diff_min), f"{out.name}_exp"))
        args = [Struct(S.SOFTMAX.struct, S.SOFTMAX.ordered(fields)), Ref(q.index), Ref(k.index), Ref(v.index), Ref(out.index),
                "scratch"]
        return self.emit("edgeosc_softmax_core_int8", args, [op, sm, out_op], out.name, scratch=k.shape[-2])
