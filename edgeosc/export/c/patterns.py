"""Patterns of builtin ops that the lowering turns into one call: a table lookup (CAST, ADD 128, GATHER), a sum pool
over time (TRANSPOSE, FULLY_CONNECTED of one weight value), and a streaming model's shifted states kept as rings
(with the pooling's running sums)."""
from __future__ import annotations

import numpy as np

from .calls import Ref, Slot, Struct, Sums
from .graph import Op
from .multipliers import act_range, product_rq


class Patterns:
    """Lowering's pattern matchers (export/c/ops.py): each returns its call(s), or None where op does not start the
    pattern. They read the graph (self.g, self.t) and record calls through self.emit."""

    def lut_chain(self, x: int):
        """CAST(x) -> ADD(+128) -> GATHER(table[256]), x read by nothing else: (ops, table, output) or None."""
        cast = self.g.sole_consumer(x, "CAST")
        return None if cast is None else self.lut_from_cast(cast)

    def lut_from_cast(self, cast: Op):
        """The table lookup a CAST int8 -> int32 starts: (ops, table tensor, output) or None."""
        if self.t(cast.inputs[0]).dtype != np.int8:
            return None
        add = self.g.sole_consumer(cast.outputs[0], "ADD")
        if add is None:
            return None
        other = self.t(add.inputs[1] if add.inputs[0] == cast.outputs[0] else add.inputs[0])
        gather = self.g.sole_consumer(add.outputs[0], "GATHER")
        if other.data is None or other.size != 1 or int(other.data.ravel()[0]) != 128 or gather is None:
            return None
        table = self.t(gather.inputs[0])
        if gather.inputs[1] != add.outputs[0] or table.data is None or table.shape != (256,) \
                or table.dtype != np.int8 or getattr(gather.options, "axis", 0) != 0:
            return None
        return [cast, add, gather], table, gather.outputs[0]

    def lut(self, op: Op):
        chain = self.lut_from_cast(op) if op.kind == "CAST" else None
        if chain is None:
            return None
        ops, table, out = chain
        return self.emit("edgeosc_lut_int8", [self.t(out).size, Ref(table.index), Ref(op.inputs[0]), Ref(out)],
                         ops, self.t(out).name)

    def pool(self, op: Op):
        """TRANSPOSE [1, T, C] -> [1, C, T], FULLY_CONNECTED with one weight value: a sum over T."""
        if op.kind != "TRANSPOSE" or len(self.t(op.inputs[0]).shape) != 3 or self.t(op.inputs[0]).shape[0] != 1:
            return None
        perm = self.t(op.inputs[1]).data
        fc = self.g.sole_consumer(op.outputs[0], "FULLY_CONNECTED")
        if perm is None or list(perm) != [0, 2, 1] or fc is None or fc.inputs[0] != op.outputs[0]:
            return None
        w = self.t(fc.inputs[1])
        if (len(fc.inputs) > 2 and fc.inputs[2] >= 0) or w.data is None or w.shape[0] != 1 \
                or np.any(w.data != w.data.flat[0]):
            return None
        x, out = self.t(op.inputs[0]), self.t(fc.outputs[0])
        lo, hi = act_range(out, fc.options.fusedActivationFunction)
        p = Struct("EdgeoscPoolParams", dict(rows=x.shape[1], cols=x.shape[2], zp_in=x.z, weight=int(w.data.flat[0]),
                                             zp_out=out.z, act_min=lo, act_max=hi, rq=product_rq(x.s, w.s, out.s)))
        return self.emit("edgeosc_sum_pool_int8", [p, Ref(x.index), Ref(out.index)], [op, fc], out.name)

    def ring(self, op: Op):
        """A state shifted by a frame, CONCATENATION([state, new], axis) then SLICE(1:) into the next state, read
        only where the order along the axis does not count: kept as a ring instead, the new entry written over the
        oldest (O(entry) a run, not O(state)). Order-free readers: a fused softmax core's keys and values (both
        rings advance together; its integer sums do not depend on the keys' order) and a FULLY_CONNECTED whose
        weights are the same along the axis (the pooling's sum). A ring read by such a FULLY_CONNECTED alone, one
        unit without a bias summing its slots, also keeps each entry's running sum, which the write updates by the
        new value less the one it overwrites: the pooling then costs O(entry) a run too (ring_pool)."""
        if op.kind != "CONCATENATION" or len(op.inputs) != 2 or op.options.fusedActivationFunction:
            return None
        pair = dict(self.g.states)
        s_in, x = (self.t(i) for i in op.inputs)
        sl = self.g.sole_consumer(op.outputs[0], "SLICE")
        if s_in.index not in pair or sl is None or sl.outputs[0] != pair[s_in.index] or \
                [c.index for c in self.g.consumers(s_in.index)] != [op.index]:
            return None
        axis = op.options.axis % len(s_in.shape)
        begin, size = (self.t(i).data for i in sl.inputs[1:])
        if begin is None or size is None or list(begin) != [int(i == axis) for i in range(len(s_in.shape))] or \
                tuple(size) != s_in.shape or x.shape[axis] != 1 or \
                any((t.s, t.z) != (s_in.s, s_in.z) for t in (x, self.t(op.outputs[0]))):
            return None
        if not all(self.order_free(c, sl.outputs[0], axis) for c in self.g.consumers(sl.outputs[0])):
            return None
        rows, n = int(np.prod(s_in.shape[:axis])), int(np.prod(s_in.shape[axis + 1:]))
        self.rings += 1
        args = [rows, s_in.shape[axis], n, Ref(x.index), Ref(s_in.index), Slot(self.rings - 1)]
        readers = self.g.consumers(sl.outputs[0])
        if len(readers) == 1 and readers[0].kind == "FULLY_CONNECTED" and self.t(readers[0].inputs[1]).shape[0] == 1 \
                and not (len(readers[0].inputs) > 2 and readers[0].inputs[2] >= 0):
            sums = self.summed[readers[0].index] = Sums(self.rings - 1, rows * n, s_in.shape[axis] * s_in.z)
            return self.emit("edgeosc_ring_sum_write_int8", [*args, sums], [op, sl], s_in.name)
        return self.emit("edgeosc_ring_write_int8", args, [op, sl], s_in.name)

    def ring_pool(self, op: Op):
        """The FULLY_CONNECTED that sums a summed ring (see ring): the pool from its running sums."""
        sums = self.summed.get(op.index)
        if sums is None:
            return None
        x, w, out = self.t(op.inputs[0]), self.t(op.inputs[1]), self.t(op.outputs[0])
        lo, hi = act_range(out, op.options.fusedActivationFunction)
        p = Struct("EdgeoscPoolParams", dict(rows=w.shape[1], cols=x.size // w.shape[1], zp_in=x.z,
                                             weight=int(w.data.flat[0]), zp_out=out.z, act_min=lo, act_max=hi,
                                             rq=product_rq(x.s, w.s, out.s)))
        return self.emit("edgeosc_sum_pool_sums_int8", [p, sums, Ref(out.index)], [op], out.name)

    def order_free(self, op: Op, t: int, axis: int) -> bool:
        """Whether op's result does not depend on the order of t's entries along axis (see ring)."""
        rank = len(self.t(t).shape)
        if op.kind == "FULLY_CONNECTED" and op.inputs[0] == t and axis == rank - 1:
            w = self.t(op.inputs[1]).data
            return w is not None and bool(np.all(w == w[:, :1]))
        if op.kind == "BATCH_MATMUL" and op.inputs[1] == t and axis == rank - 2:
            producer = {o: p for p in self.g.ops for o in p.outputs}
            if op.options.adjY:  # keys: their scores through SOFTMAX into the values' matmul
                sm = self.g.sole_consumer(op.outputs[0], "SOFTMAX")
                other = sm and self.g.sole_consumer(sm.outputs[0], "BATCH_MATMUL")
            else:  # values: after SOFTMAX of the keys' scores
                sm = producer.get(op.inputs[0])
                other = producer.get(sm.inputs[0]) if sm is not None and sm.kind == "SOFTMAX" else None
            if other is None or other.kind != "BATCH_MATMUL":
                return False
            partner = other.inputs[1]  # the other cache: a state shifted the same way, read by that matmul only,
            shifted = partner in self.alias and producer.get(partner) is not None \
                and producer[partner].kind == "SLICE"  # so the two rings turn together
            return shifted and [c.index for c in self.g.consumers(partner)] == [other.index]
        return False
