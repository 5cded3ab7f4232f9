"""Decoding for the cycle estimator (cycles.py): each translation block decoded once with capstone into a class
histogram (cycles.CLASSES) and the pipeline facts the core tables price (cycles.STRUCTURE): back-to-back loads,
address dependencies, load-use stalls, dual-issue pairs, and how the block's last instruction changes flow."""
from __future__ import annotations

import re
from dataclasses import dataclass

_DSP = re.compile(r"^(sm(la|ul|ls|ua|us|ml|mu)\w*|um(ull|lal|aal)|q(d?add|d?sub|asx|sax)\w*|"
                  r"(s|u|sh|uh|uq)(add|sub|asx|sax)(8|16)|[su]sat(16)?|[su]xtab?16|sel|pkh(bt|tb)|usada?8)$")
_T_BRANCH = {"b", "bl", "blx", "bx", "cbz", "cbnz", "tbb", "tbh"}
_T_OTHER = {"nop", "dmb", "dsb", "isb", "bkpt", "svc", "wfi", "wfe", "sev", "mrs", "msr", "cpsie", "cpsid",
            "yield", "udf", "clrex"}
_A_BRANCH = {"b", "bl", "br", "blr", "ret", "cbz", "cbnz", "tbz", "tbnz"}
_A_MUL = {"mul", "madd", "msub", "mneg", "smull", "umull", "smaddl", "umaddl", "smsubl", "umsubl", "smulh",
          "umulh", "smnegl", "umnegl"}


@dataclass
class Insn:
    """One decoded instruction: its class and what the pipeline rules need."""
    cls: str
    nregs: int = 0
    reads: frozenset = frozenset()
    writes: frozenset = frozenset()
    addr: frozenset = frozenset()  # base and index registers of a memory operand
    single_load: bool = False
    regoff: bool = False
    branch: bool = False  # ends the block by changing flow (B, BX, POP {pc}, LDR pc, TBB ...)
    cond: bool = False


def thumb(insn, A) -> Insn:
    name = insn.insn_name()
    reads, writes = (frozenset(r) for r in insn.regs_access())
    mem = [op.mem for op in insn.operands if op.type == A.ARM_OP_MEM]
    addr = frozenset(r for m in mem for r in (m.base, m.index) if r)
    cond = insn.cc not in (A.ARM_CC_AL, A.ARM_CC_INVALID) or name in ("cbz", "cbnz")
    writes_pc = A.ARM_REG_PC in writes
    regs = [op.reg for op in insn.operands if op.type == A.ARM_OP_REG]
    data_w = writes - addr if mem else writes
    kw = dict(reads=reads, writes=data_w, addr=addr, cond=cond)
    if name in ("tbb", "tbh"):  # a byte/halfword table load, then a refill: "2+P" (TRM Table 3-1)
        return Insn("load", branch=True, single_load=False, **kw)
    if name in _T_BRANCH:
        return Insn("branch", branch=True, **kw)
    if name in ("push", "pop", "vpush", "vpop") or re.match(r"v?(ldm|stm)", name):
        listed = name in ("push", "pop", "vpush", "vpop")  # no base operand: SP
        base = frozenset([A.ARM_REG_SP] if listed else regs[:1])
        cls = "ldm" if name in ("pop", "vpop") or name.startswith(("ldm", "vldm")) else "stm"
        return Insn(cls, nregs=len(regs) - (0 if listed else 1), reads=reads, writes=writes - base, addr=base,
                     branch=writes_pc, cond=cond)
    if name in ("ldrd", "strd", "ldrexd", "strexd"):
        return Insn("ldm" if name.startswith("ld") else "stm", nregs=2, **kw)
    if name in ("vldr", "vstr"):
        return Insn("fp_mem", **kw)
    if name.startswith("ldr") or name.startswith("ldaex") or name == "lda":
        return Insn("load", single_load=not writes_pc, branch=writes_pc, **kw)
    if name.startswith("str") or name.startswith("stl"):
        return Insn("store", regoff=any(m.index for m in mem), **kw)
    if name in ("sdiv", "udiv"):
        return Insn("div", **kw)
    if name in ("mul", "mla", "mls"):
        return Insn("mul", **kw)
    if _DSP.match(name):
        return Insn("dsp", **kw)
    if name.startswith("v"):
        if re.match(r"v(n?ml[as]|f?n?fm[as])$", name):
            return Insn("fp_mac", **kw)
        return Insn("fp_div" if name in ("vdiv", "vsqrt") else "fp", **kw)
    if name == "it":
        return Insn("it", **kw)
    if name in _T_OTHER:
        return Insn("other", **kw)
    return Insn("alu", branch=writes_pc, **kw)  # MOV pc / ADD pc: "1 + P"


def a64(insn, A) -> Insn:
    name = insn.insn_name()
    reads, writes = (frozenset(r) for r in insn.regs_access())
    mem = [op.mem for op in insn.operands if op.type == A.ARM64_OP_MEM]
    addr = frozenset(r for m in mem for r in (m.base, m.index) if r)
    regs = [op.reg for op in insn.operands if op.type == A.ARM64_OP_REG]
    vector = any(A.ARM64_REG_V0 <= r <= A.ARM64_REG_V31 for r in regs)
    fpreg = vector or any(_a64_fp(r, A) for r in regs)
    cond = insn.cc not in (A.ARM64_CC_AL, A.ARM64_CC_INVALID, A.ARM64_CC_NV) or name in (
        "cbz", "cbnz", "tbz", "tbnz")
    kw = dict(reads=reads, writes=writes - addr if mem else writes, addr=addr, cond=cond)
    if name in _A_BRANCH:
        return Insn("branch", branch=True, **kw)
    if mem or name.startswith(("ld", "st")):
        load = name.startswith("ld")
        data = [r for r in regs if r not in addr]
        if len(data) > 1:  # LDP/STP, LD1 {v0, v1}: one transfer of several registers
            return Insn("ldm" if load else "stm", nregs=len(data), **kw)
        return Insn("load" if load else "store", single_load=load, regoff=any(m.index for m in mem), **kw)
    if name in ("sdiv", "udiv"):
        return Insn("div", **kw)
    if vector:
        return Insn("simd", **kw)
    if fpreg and name.startswith("f"):
        if name in ("fmadd", "fmsub", "fnmadd", "fnmsub"):
            return Insn("fp_mac", **kw)
        return Insn("fp_div" if name in ("fdiv", "fsqrt") else "fp", **kw)
    if name in _A_MUL:
        return Insn("mul", **kw)
    if name in ("nop", "hint", "dmb", "dsb", "isb", "svc", "hlt", "brk", "mrs", "msr", "yield", "wfi", "wfe"):
        return Insn("other", **kw)
    return Insn("fp" if fpreg else "alu", **kw)


def _a64_fp(reg: int, A) -> bool:
    """Whether an AArch64 register id names a scalar FP/SIMD register (B, H, S, D, Q)."""
    return any(getattr(A, f"ARM64_REG_{p}0") <= reg <= getattr(A, f"ARM64_REG_{p}31") for p in "BHSDQ")


# Pipes per class for the greedy dual-issue pairing: LLVM's ARMScheduleM7.td and AArch64SchedA53.td.
_PIPE = {"alu": "I", "it": "I", "mul": "M", "dsp": "M", "load": "L", "store": "S", "fp": "F", "fp_mac": "F",
         "simd": "F", "fp_mem": "L", "branch": "B"}
_PAIR_LIMITS = {"thumb": {"I": 2, "M": 1, "L": 2, "S": 1, "F": 1, "B": 1},  # M7: 2 ALU, 2 load, 1 store...
                "a64": {"I": 2, "M": 1, "L": 1, "S": 1, "F": 1, "B": 1}}  # A53: 1 load/store unit
_LDST_SHARED = {"thumb": False, "a64": True}


def _pairs(insns: list[Insn], isa: str) -> int:
    """Greedy count of adjacent pairs a dual-issue core could issue together (see CORES notes)."""
    limits, n, i = _PAIR_LIMITS[isa], 0, 0
    while i + 1 < len(insns):
        a, b = insns[i], insns[i + 1]
        pa, pb = _PIPE.get(a.cls), _PIPE.get("branch" if b.branch else b.cls)
        ok = pa is not None and pb is not None and not a.branch
        if ok:
            use = {pa: 1}
            use[pb] = use.get(pb, 0) + 1
            if _LDST_SHARED[isa] and "L" in use and "S" in use:
                ok = False
            ok = ok and all(v <= limits[k] for k, v in use.items())
            dep = a.writes & (b.reads | b.writes | b.addr)
            ok = ok and not (dep and not b.branch)  # a branch may read the flags set beside it
        if ok:
            n += 1
            i += 2
        else:
            i += 1
    return n


@dataclass
class Block:
    """One translation block: its static histogram and how its last instruction changes flow."""
    hist: dict
    ninsn: int
    term: str | None  # "b" (branch class) or "pc" (a load writing PC); None: falls through
    cond: bool


def analyse(insns: list[Insn], isa: str) -> Block:
    """Class histogram and pipeline facts of one block; the conditional terminator is left to run time."""
    hist: dict = {}

    def add(k, v=1):
        hist[k] = hist.get(k, 0) + v

    prev = None
    for i, ins in enumerate(insns):
        if ins.cls != "branch":
            add(ins.cls)
        elif i < len(insns) - 1:  # not seen from unicorn (a branch ends its block); counted as falling through
            add("branch_not_taken")
        if ins.cls in ("ldm", "stm"):
            add(ins.cls + "_regs", ins.nregs)
        if ins.regoff and ins.cls == "store":
            add("store_regoff")
        if prev is not None:
            if prev.single_load and (ins.single_load or (ins.cls == "store" and ins.regoff)) \
                    and not (prev.writes & ins.addr):
                add("ls_pipelined")
            if prev.cls in ("alu", "mul", "dsp", "div") and ins.addr and prev.writes & ins.addr \
                    and ins.cls in ("load", "store", "ldm", "stm", "fp_mem"):
                add("addr_dep")
            if prev.cls in ("load", "ldm", "fp_mem") and not ins.branch and prev.writes & (ins.reads | ins.addr):
                add("load_use")
        prev = ins
    add("dual_pairs", _pairs(insns, isa))
    last = insns[-1]
    term, cond = None, False
    if last.branch:
        term, cond = ("b" if last.cls in ("branch", "alu") else "pc"), last.cond
        if last.cls == "alu":  # MOV pc: "1 + P" = the ALU slot plus a taken branch's refill
            hist["alu"] -= 1
        if not cond:
            add("branch_taken" if term == "b" else "pc_load")
    return Block({k: v for k, v in hist.items() if v}, len(insns), term, cond)
