"""Deterministic cycle ESTIMATES for ARM code without boards: emulate one function, count instructions by class.

`emulate()` loads a bare-metal ELF (Thumb-2 for Cortex-M4/M7/M33, or AArch64 for Cortex-A53/A72) into
unicorn, calls one symbol with AAPCS arguments, stops when it returns to a magic address and reads the
buffers back. Counting is per translation block: each block is decoded once with capstone (decode.py) into a class
histogram (plus a few pipeline facts: back-to-back loads, address dependencies, dual-issue pairs), and
the Python hook only counts block executions and conditional-branch outcomes (next block == fall-through).
Per function: `Run.by_function` attributes each block to the symbol-table function holding it (callees
not included); `emulate(scopes=...)` also counts named functions' calls with their callees (`Run.scoped`).

`cycles(counts, core)` turns the counts into cycles with a per-core table (`CORES`). Only the Cortex-M4
table is Arm's published one; every other core is an approximation whose assumptions `CORES[...].notes`
states. Not modelled anywhere: wait states, caches, bus contention, interrupts, operand-dependent divide
time. Instructions skipped by an IT block are counted at full cost.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .decode import Block, a64, analyse, thumb

# Where the emulator puts what the ELF does not: outside the mps2.ld map (code 0..4M, RAM 0x2000_0000..+4M),
# in the ARMv7-M default map's executable "External RAM" region 0x6000_0000-0x9FFF_FFFF (the peripheral
# region below it is execute-never, and 0xE000_0000 up is the PPB / EXC_RETURN range).
RETURN_ADDR = 0x9FFF_F000  # LR points here; reaching it ends the call
ARENA_BASE = 0x6000_0000  # input/output buffers, 64-byte aligned
STACK_SIZE = 0x10_0000
STACK_TOP = 0x7000_0000 + STACK_SIZE
STACK_PAINT = (0x5AC3A55C).to_bytes(4, "little")  # the emulated stack's fill, to find how deep a call went
PAGE = 0x1000

# ---------------------------------------------------------------- classes
# alu: data processing (MOV/ADD/CMP/shifts/extends/bitfield); mul: 32-bit MUL/MLA/MLS (A64: MADD/SMULL...);
# dsp: Armv7E-M DSP (long multiplies, SMLAD/SMUAD/SMLAxy, SXTB16, SSAT/USAT, Q-arith, SIMD add/sub);
# div: SDIV/UDIV; load/store: single transfers (store_regoff: stores with a register offset, a subset);
# ldm/stm: LDM/STM/PUSH/POP/LDRD/STRD/VLDM/VPUSH/LDP/STP with their register counts in ldm_regs/stm_regs;
# branch_taken / branch_not_taken: B/BL/BX/CBZ/TBB...; pc_load: loads writing PC (POP {pc}, LDR pc, TBB):
# the refill on top of the load; fp / fp_mac / fp_div / fp_mem: scalar FPU; simd: AArch64 Advanced SIMD;
# it: the IT instruction; other: NOP, barriers, system.
CLASSES = ("alu", "mul", "dsp", "div", "load", "store", "store_regoff", "ldm", "stm", "ldm_regs", "stm_regs",
           "branch_taken", "branch_not_taken", "pc_load", "fp", "fp_mac", "fp_div", "fp_mem", "simd", "it",
           "other")
# Facts of the instruction stream that timing tables price (not instruction counts):
# ls_pipelined: an LDR, or a register-offset STR, right after an LDR whose data register it does not use
#   for its address; addr_dep: a load/store whose address register the previous data-processing
#   instruction wrote; load_use: an instruction reading the register the previous load wrote;
# dual_pairs: adjacent pairs a dual-issue core could issue together (greedy, per-ISA rules below);
# mispredict_est: per conditional-branch site, min(taken, not taken): the mispredictions of a 2-bit
#   counter on loop-like patterns (a loop of n trips, run m times, gives m).
STRUCTURE = ("ls_pipelined", "addr_dep", "load_use", "dual_pairs", "mispredict_est")
_NOT_INSTRUCTIONS = {"store_regoff", "ldm_regs", "stm_regs", "pc_load", *STRUCTURE}


@dataclass(frozen=True)
class CoreModel:
    """A timing table: weights per count (cycles = sum count * weight), or a throughput bound for out-of-order."""
    name: str
    isa: str  # "thumb" or "a64"
    weights: Mapping[str, float]
    source: str
    notes: str = ""
    unicorn_cpu: str = ""
    width: int = 1  # out-of-order only: instructions decoded per cycle
    pipes: Mapping[str, tuple[int, tuple[str, ...]]] = field(default_factory=dict)  # out-of-order only

    @property
    def out_of_order(self) -> bool:
        return bool(self.pipes)


_M4_P = 2  # pipeline refill: "1 to 3 depending on alignment and width of the target" (M4 TRM 3.3.1); the
# Cortex-M3 r1p1 TRM (DDI 0337E, 18.2 Table 18.1) states "two cycles are added" for a taken branch.
_M4_DIV = 7  # SDIV/UDIV "2 to 12" with early termination (M4 TRM Table 3-1): the midpoint, not operand-exact
_M4 = {
    "alu": 1, "mul": 1, "dsp": 1, "div": _M4_DIV,  # MUL, MLA, MLS, SMULL, SMLAL, SMLAD... all 1 (Table 3-1)
    "load": 2, "store": 1, "store_regoff": 1,  # LDR 2; STR Rx,[Ry,#imm] always 1, register offset 2 (3.3.2)
    "ldm": 1, "ldm_regs": 1, "stm": 1, "stm_regs": 1,  # LDM/STM/PUSH/POP/LDRD/STRD 1+N
    "branch_taken": 1 + _M4_P, "branch_not_taken": 1, "pc_load": _M4_P,  # B 1+P, B<cc> 1 or 1+P, POP{pc} 1+N+P
    "fp": 1, "fp_mac": 3, "fp_div": 14, "fp_mem": 2,  # FPU table: VADD/VMUL 1, VMLA/VFMA 3, VDIV/VSQRT 14, VLDR 2
    "simd": 1, "it": 1, "other": 1,
    "ls_pipelined": -1,  # "one cycle is removed from the cost of the next instruction" (3.3.2)
    "addr_dep": 1,  # "stalls the pipeline for an additional cycle" (3.3.2)
    "load_use": 0, "dual_pairs": 0, "mispredict_est": 0,
}
_M4_SOURCE = ("Arm Cortex-M4 Processor TRM (ARM 100166_0001_00_en, r0p1; was DDI 0439): 3.3.1 Table 3-1 "
              "'Processor instruction set summary', 3.3.2 'Load/store timings', and the FPU chapter's "
              "instruction table (VADD 1, VMLA/VFMA 3, VDIV/VSQRT 14, VLDR 2, VLDM 1+N)")

_M7 = {
    "alu": 1, "mul": 1, "dsp": 1, "div": 7, "load": 1, "store": 1, "store_regoff": 0,
    "ldm": 1, "ldm_regs": 0.5, "stm": 1, "stm_regs": 0.5, "branch_taken": 1, "branch_not_taken": 1,
    "pc_load": 1, "fp": 1, "fp_mac": 1, "fp_div": 16, "fp_mem": 1, "simd": 1, "it": 1, "other": 1,
    "ls_pipelined": 0, "addr_dep": 0, "load_use": 1, "dual_pairs": -1, "mispredict_est": 6,
}
_A53 = {
    "alu": 1, "mul": 1, "dsp": 1, "div": 4, "load": 1, "store": 1, "store_regoff": 0,
    "ldm": 0, "ldm_regs": 1, "stm": 0, "stm_regs": 1, "branch_taken": 1, "branch_not_taken": 1,
    "pc_load": 0, "fp": 1, "fp_mac": 1, "fp_div": 14, "fp_mem": 1, "simd": 2, "it": 1, "other": 1,
    "ls_pipelined": 0, "addr_dep": 0, "load_use": 2, "dual_pairs": -1, "mispredict_est": 9,
}

CORES: dict[str, CoreModel] = {
    "cortex-m4": CoreModel(
        "cortex-m4", "thumb", _M4, _M4_SOURCE, unicorn_cpu="UC_CPU_ARM_CORTEX_M4",
        notes=f"P = {_M4_P} (range 1-3), DIV = {_M4_DIV} (range 2-12); zero wait states (the TRM's basis)."),
    "cortex-m33": CoreModel(
        "cortex-m33", "thumb", _M4, "approximation: the Cortex-M4 table (" + _M4_SOURCE + ")",
        unicorn_cpu="UC_CPU_ARM_CORTEX_M33",
        notes="Arm publishes no instruction timing table for Cortex-M33 (its TRM, Arm 100230, has none). Both "
              "are 3-stage in-order cores with the same DSP and single-precision FPU extensions, so the M4 "
              "table is used unchanged; the M33's earlier address generation may make its loads cheaper."),
    "cortex-m7": CoreModel(
        "cortex-m7", "thumb", _M7, "approximation: LLVM's Cortex-M7 scheduling model "
        "(llvm/lib/Target/ARM/ARMScheduleM7.td: IssueWidth 2, in-order, 2 ALU + 2 load + 1 store + 1 MAC + "
        "1 branch + 1 VFP pipe, DIV latency 7 single-issue, LDM/STM/LDRD single-issue, LoadLatency 2, "
        "'mispredict cost for forward branches is 6')",
        unicorn_cpu="UC_CPU_ARM_CORTEX_M7",
        notes="Arm publishes no Cortex-M7 cycle table. Assumed: 1 issue slot per instruction, adjacent pairs "
              "dual-issue when the pipes allow and the second does not read or write the first's result "
              "(dual_pairs, -1 each), +1 on load-use, LDM/STM 1 + N/2 (64-bit bus), predicted branches free "
              "beyond their slot, 6 cycles per estimated misprediction."),
    "cortex-a53": CoreModel(
        "cortex-a53", "a64", _A53, "estimate: LLVM's Cortex-A53 model (llvm/lib/Target/AArch64/"
        "AArch64SchedA53.td: in-order, IssueWidth 2, 2 ALU + 1 MAC + 1 divide + 1 load/store + 1 branch + "
        "FP ALU + FP MDS, LoadLatency 3, MispredictPenalty 9 'based on Cortex-A53 Software Optimisation "
        "Specification - Instruction Timings'), which Arm has not published",
        unicorn_cpu="UC_CPU_ARM64_A53",
        notes="In-order dual issue: 1 cycle per instruction, -1 per pair the pipes allow, +2 per load-use "
              "(3-cycle load latency), LDP/STP 1 per 64-bit register, 128-bit SIMD at half rate (2), "
              "SDIV 4 (LLVM's latency), 9 per estimated misprediction. No cache misses."),
    "cortex-a72": CoreModel(
        "cortex-a72", "a64", {"mispredict_est": 16, "div": 8, "fp_div": 10},  # div, fp_div: pipe occupancy
        "estimate: Arm Cortex-A72 Software Optimization Guide (UAN 0016A, 2015): 2.1 pipeline (3-wide "
        "decode; Branch, 2 Integer, Integer multi-cycle, 2 FP/ASIMD, Load, Store pipes) and 3.x instruction "
        "tables (ALU throughput 2/cycle, MUL 1 on M, SDIV W-form 1/12-1/4 on M, loads 1 on L, stores 1 on S); "
        "misprediction 16 from LLVM's Cortex-A57 model (AArch64SchedA57.td), which LLVM also uses for A72",
        unicorn_cpu="UC_CPU_ARM64_A72", width=3,
        pipes={"I": (2, ("alu", "it", "other")), "M": (1, ("mul", "dsp", "div")),
               "L": (1, ("load", "ldm", "fp_mem")),
               "S": (1, ("store", "stm")), "B": (1, ("branch_taken", "branch_not_taken")),
               "F": (2, ("fp", "fp_mac", "fp_div", "simd"))},
        notes="Out-of-order: a throughput bound, max(instructions / 3, busiest pipe), plus 16 per estimated "
              "misprediction; divides occupy M for 8 (midpoint of 4-12), FP divides F for 10. Ignores latency "
              "chains (an accumulator chain bounds at its MAC latency) and cache misses: a lower bound."),
}


def cycles(counts: Mapping[str, float], core: str | CoreModel) -> float:
    """Estimated cycles for a class histogram (from `emulate`) on one core of `CORES`."""
    model = CORES[core] if isinstance(core, str) else core
    if not model.out_of_order:
        return float(sum(float(counts.get(k, 0)) * w for k, w in model.weights.items()))
    w = model.weights  # cycles a pipe is busy per instruction (1 unless listed)
    busy = [sum(float(counts.get(c, 0)) * w.get(c, 1) for c in classes) / units
            for units, classes in model.pipes.values()]
    bound = max(instructions_in(counts) / model.width, *busy)
    return bound + float(counts.get("mispredict_est", 0)) * w["mispredict_est"]


def instructions_in(counts: Mapping[str, float]) -> int:
    """Executed instructions in a histogram (the classes, not the register counts or pipeline facts)."""
    return int(sum(v for k, v in counts.items() if k not in _NOT_INSTRUCTIONS))


# ---------------------------------------------------------------- ELF loading and the call
@dataclass
class Run:
    """One emulated call: class counts, instructions, estimated cycles (None without a core), outputs."""
    counts_by_class: dict
    instructions: int
    cycles: float | None
    outputs: dict
    core: str | None
    return_value: int
    blocks: int  # distinct translation blocks
    block_executions: int
    seconds: float  # emulation wall time (decode included)
    # Per function of the symbol table: the counts of the blocks inside it (exclusive: callees not included)
    by_function: dict = field(default_factory=dict)
    # Per name in emulate(scopes=...): the counts of every call of it, callees included, and its calls
    scoped: dict = field(default_factory=dict)
    scope_calls: dict = field(default_factory=dict)
    # Deepest stack the call used, in bytes below its entry SP (the emulated stack is painted before the call)
    stack_bytes: int = 0

    @property
    def instructions_per_second(self) -> float:
        return self.instructions / self.seconds if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class Elf:
    """What the emulator needs from an ELF: its ISA, loadable segments and function symbols."""
    isa: str
    segments: tuple[tuple[int, bytes, int], ...]  # (address, file bytes, memory size)
    symbols: Mapping[str, int]
    sizes: Mapping[str, int] = field(default_factory=dict)  # function symbols: bytes of code

    def functions(self) -> list[tuple[int, int, str]]:
        """(start, end, name) of each sized function, by address (Thumb bit cleared)."""
        mask = ~1 if self.isa == "thumb" else ~0
        return sorted((self.symbols[n] & mask, (self.symbols[n] & mask) + size, n) for n, size in self.sizes.items())

    @classmethod
    def read(cls, path: str | Path) -> Elf:
        """Read the PT_LOAD segments (at their virtual addresses) and the symbol table."""
        from elftools.elf.elffile import ELFFile
        with open(path, "rb") as f:
            elf = ELFFile(f)
            machine = elf["e_machine"]
            if machine not in ("EM_ARM", "EM_AARCH64"):
                raise ValueError(f"{path}: {machine} is not an ARM ELF")
            segs = tuple((s["p_vaddr"], s.data(), s["p_memsz"]) for s in elf.iter_segments()
                         if s["p_type"] == "PT_LOAD" and s["p_memsz"])
            syms, sizes = {}, {}
            for sec in elf.iter_sections():
                if sec["sh_type"] == "SHT_SYMTAB":
                    syms.update({s.name: s["st_value"] for s in sec.iter_symbols() if s.name and (
                        s["st_info"]["type"] in ("STT_FUNC", "STT_OBJECT") or  # or a global assembly label
                        (s["st_info"]["type"] == "STT_NOTYPE" and s["st_info"]["bind"] != "STB_LOCAL"))})
                    sizes.update({s.name: s["st_size"] for s in sec.iter_symbols()
                                  if s.name and s["st_info"]["type"] == "STT_FUNC" and s["st_size"]})
        return cls("thumb" if machine == "EM_ARM" else "a64", segs, syms, sizes)


def _pages(lo: int, hi: int) -> tuple[int, int]:
    return lo & ~(PAGE - 1), (hi + PAGE - 1) & ~(PAGE - 1)


def _map(uc, regions: list[tuple[int, int]]) -> None:
    """Map the union of [lo, hi) regions, page-aligned and merged."""
    spans = sorted(_pages(lo, hi) for lo, hi in regions if hi > lo)
    merged: list[list[int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    for lo, hi in merged:
        uc.mem_map(lo, hi - lo)


def _layout(buffers: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Arena addresses of the buffers, in order, 64-byte aligned."""
    addrs, at = {}, ARENA_BASE
    for name, arr in buffers.items():
        addrs[name] = at
        at += (max(arr.nbytes, 1) + 63) & ~63
    return addrs


def emulate(elf_path: str | Path, symbol: str, args: Sequence[int | str] = (),
            buffers: Mapping[str, np.ndarray] | None = None, core: str | None = "cortex-m4",
            timeout_s: float = 600.0, scopes: Sequence[str] = ()) -> Run:
    """Call `symbol(*args)` in the ELF under unicorn and count what executed.

    `buffers` go into RAM before the call and come back in `outputs` (same dtype and shape) after it; an
    argument that is a string is the address of the buffer of that name. Integer arguments follow AAPCS
    (r0-r3 then the stack; AArch64: x0-x7 then the stack); floating-point arguments are not supported.
    `core=None` counts instructions and classes only. Raises RuntimeError if the call does not return.
    `scopes`: functions whose calls are also counted apart, callees included (`Run.scoped`); meant for
    functions called a few times (each call copies the block counters), not for leaf helpers.
    """
    import unicorn as U
    elf = Elf.read(elf_path)
    model = CORES[core] if core else None
    if model and model.isa != elf.isa:
        raise ValueError(f"{elf_path} is {elf.isa} code; {core} runs {model.isa}")
    for name in (symbol, *scopes):
        if name not in elf.symbols:
            raise KeyError(f"{elf_path}: no symbol {name!r}")
    bufs = {k: np.ascontiguousarray(v) for k, v in (buffers or {}).items()}
    where = _layout(bufs)
    thumb = elf.isa == "thumb"
    if thumb:
        uc = U.Uc(U.UC_ARCH_ARM, U.UC_MODE_THUMB | U.UC_MODE_MCLASS)
        cpu = model.unicorn_cpu if model else "UC_CPU_ARM_CORTEX_M4"
        uc.ctl_set_cpu_model(getattr(U.arm_const, cpu))
    else:
        uc = U.Uc(U.UC_ARCH_ARM64, U.UC_MODE_ARM)
        cpu = model.unicorn_cpu if model else "UC_CPU_ARM64_A72"
        uc.ctl_set_cpu_model(getattr(U.arm64_const, cpu))
    arena_end = ARENA_BASE + sum((max(a.nbytes, 1) + 63) & ~63 for a in bufs.values())
    if arena_end > STACK_TOP - STACK_SIZE:
        raise ValueError(f"buffers need {arena_end - ARENA_BASE} bytes; the arena holds "
                         f"{STACK_TOP - STACK_SIZE - ARENA_BASE}")
    ours = [(RETURN_ADDR, RETURN_ADDR + PAGE), (STACK_TOP - STACK_SIZE, STACK_TOP),
            (ARENA_BASE, max(arena_end, ARENA_BASE + PAGE))]
    segs = [(a, a + max(m, len(d))) for a, d, m in elf.segments]
    for lo, hi in segs:
        if any(lo < b and a < hi for a, b in ours):
            raise ValueError(f"{elf_path}: a segment at {lo:#x}-{hi:#x} overlaps the emulator's arena/stack")
    _map(uc, segs + ours)
    for a, d, _ in elf.segments:
        uc.mem_write(a, d)
    for name, arr in bufs.items():
        uc.mem_write(where[name], arr.tobytes())

    values = [where[a] if isinstance(a, str) else int(a) for a in args]
    sp = STACK_TOP - 0x100
    uc.mem_write(STACK_TOP - STACK_SIZE, STACK_PAINT * ((sp - (STACK_TOP - STACK_SIZE)) // 4))
    nreg, word = (4, 4) if thumb else (8, 8)
    spill = values[nreg:]
    if spill:
        sp -= ((len(spill) * word + 15) & ~15)
        for i, v in enumerate(spill):
            uc.mem_write(sp + i * word, (v & ((1 << (8 * word)) - 1)).to_bytes(word, "little"))
    if thumb:
        R = U.arm_const
        for i, v in enumerate(values[:nreg]):
            uc.reg_write(R.UC_ARM_REG_R0 + i, v & 0xFFFF_FFFF)
        uc.reg_write(R.UC_ARM_REG_SP, sp)
        uc.reg_write(R.UC_ARM_REG_LR, RETURN_ADDR | 1)
        start, pc_reg, ret_reg = elf.symbols[symbol] | 1, R.UC_ARM_REG_PC, R.UC_ARM_REG_R0
    else:
        R = U.arm64_const
        for i, v in enumerate(values[:nreg]):
            uc.reg_write(R.UC_ARM64_REG_X0 + i, v & 0xFFFF_FFFF_FFFF_FFFF)
        uc.reg_write(R.UC_ARM64_REG_SP, sp)
        uc.reg_write(R.UC_ARM64_REG_X30, RETURN_ADDR)
        uc.reg_write(R.UC_ARM64_REG_CPACR_EL1, 3 << 20)  # FPEN: let FP/SIMD execute
        start, pc_reg, ret_reg = elf.symbols[symbol], R.UC_ARM64_REG_PC, R.UC_ARM64_REG_X0

    entries = {elf.symbols[n] & (~1 if thumb else ~0): n for n in scopes}
    counter = _BlockCounter(uc, elf.isa, entries)
    t0 = time.perf_counter()
    try:
        uc.emu_start(start, RETURN_ADDR, timeout=int(timeout_s * 1e6))
    except U.UcError as e:
        raise RuntimeError(f"{symbol}: {e} at pc={uc.reg_read(pc_reg):#x}") from e
    seconds = time.perf_counter() - t0
    if counter.error is not None:
        raise counter.error
    counter.close_scopes()
    pc = uc.reg_read(pc_reg)
    if pc & ~1 != RETURN_ADDR:
        raise RuntimeError(f"{symbol} did not return within {timeout_s} s (pc={pc:#x})")
    counts = counter.counts()
    outputs = {k: np.frombuffer(bytes(uc.mem_read(where[k], v.nbytes)), dtype=v.dtype).reshape(v.shape).copy()
               for k, v in bufs.items()}
    ret = uc.reg_read(ret_reg)
    return Run(counts, instructions_in(counts), cycles(counts, model) if model else None, outputs, core, ret,
               len(counter.blocks), sum(r[0] for r in counter.blocks.values()), seconds,
               counter.by_function(elf.functions()), {n: counter.counts(e) for n, e in counter.scoped.items()},
               dict(counter.scope_calls), _stack_used(uc, sp))


def _stack_used(uc, sp: int) -> int:
    """Bytes below `sp` that no longer hold the paint: the call's deepest stack (short of the truth only where its
    deepest words were written with the paint's own value)."""
    base = STACK_TOP - STACK_SIZE
    words = np.frombuffer(bytes(uc.mem_read(base, sp - base)), np.uint32)
    touched = np.flatnonzero(words != np.frombuffer(STACK_PAINT, np.uint32)[0])
    return int(sp - (base + 4 * touched[0])) if touched.size else 0


class _BlockCounter:
    """The unicorn block hook: decodes a block the first time, then only counts it and branch outcomes."""

    def __init__(self, uc, isa: str, entries: Mapping[int, str] | None = None):
        import capstone as C
        import unicorn as U
        if isa == "thumb":
            self._cs = C.Cs(C.CS_ARCH_ARM, C.CS_MODE_THUMB | C.CS_MODE_MCLASS)
            self._const, self._decode = C.arm_const, thumb
        else:
            self._cs = C.Cs(C.CS_ARCH_ARM64, C.CS_MODE_ARM)
            self._const, self._decode = C.arm64_const, a64
        self._cs.detail = True
        self.isa, self.uc, self.error = isa, uc, None
        self.info: dict[tuple[int, int], Block] = {}
        # per block: [executions, fall-through address if it ends in a conditional branch else 0, not taken]
        self.blocks: dict[tuple[int, int], list] = {}
        blocks, first, prev = self.blocks, self._first, [None]
        # scopes: entry address -> name; while calls are open, their return address -> [(name, snapshot)]
        watch = self._watch = dict(entries or {})
        self.scoped: dict[str, dict] = {}
        self.scope_calls: dict[str, int] = {}
        self._lr = (U.arm_const.UC_ARM_REG_LR if isa == "thumb" else U.arm64_const.UC_ARM64_REG_X30)

        def on_block(_handle, address, size, _user):
            if address in watch:  # before counting: an entry block is inside its call, a return block not
                self._scope_event(watch, address)
            key = (address, size)
            rec = blocks.get(key)
            if rec is None:
                rec = first(key)
                if rec is None:
                    return
            rec[0] += 1
            p = prev[0]
            if p is not None and address == p[1]:
                p[2] += 1
            prev[0] = rec if rec[1] else None

        self._install(uc, on_block)

    def _scope_event(self, watch: dict, address: int) -> None:
        """Open a call at a scope's entry (snapshot the counters), or close the calls its return address ends."""
        what = watch[address]
        if isinstance(what, str):
            if any(isinstance(v, list) and any(c[0] == what for c in v) for v in watch.values()):
                return  # a recursive call counts in the open one
            ret = self.uc.reg_read(self._lr) & ~1
            watch.setdefault(ret, []).append((what, {k: (r[0], r[2]) for k, r in self.blocks.items()}))
            return
        for call in watch.pop(address):  # a list: tail calls share their caller's return address
            self._close(*call)

    def close_scopes(self) -> None:
        """Close the calls still open when the emulation stopped (a scope that is the called symbol)."""
        for ret in [a for a, v in self._watch.items() if isinstance(v, list)]:
            for call in self._watch.pop(ret):
                self._close(*call)

    def _close(self, name: str, snap: dict) -> None:
        acc = self.scoped.setdefault(name, {})
        for k, r in self.blocks.items():
            n0, nt0 = snap.get(k, (0, 0))
            if r[0] > n0:
                a = acc.setdefault(k, [0, 0])
                a[0] += r[0] - n0
                a[1] += r[2] - nt0
        self.scope_calls[name] = self.scope_calls.get(name, 0) + 1

    def _install(self, uc, on_block) -> None:
        """Register the hook as a bare ctypes callback (twice the block rate of Uc.hook_add's wrappers,
        which it falls back to if this unicorn's internals differ)."""
        import ctypes
        import unicorn as U
        try:
            from unicorn.unicorn_py3.unicorn import HOOK_CODE_CFUNC, uc_hook_h, uclib
            self._fptr = HOOK_CODE_CFUNC(on_block)
            handle = uc_hook_h()
            if uclib.uc_hook_add(uc._uch, ctypes.byref(handle), U.UC_HOOK_BLOCK, self._fptr, None,
                                 ctypes.c_uint64(1), ctypes.c_uint64(0)) == U.UC_ERR_OK:
                return
        except (ImportError, AttributeError):
            pass
        uc.hook_add(U.UC_HOOK_BLOCK, lambda _uc, a, s, u: on_block(None, a, s, u))

    def _first(self, key) -> list | None:
        address, size = key
        try:
            code = bytes(self.uc.mem_read(address, size))
            insns = [self._decode(i, self._const) for i in self._cs.disasm(code, address)]
            if not insns:
                raise RuntimeError(f"capstone could not decode the block at {address:#x}")
            block = self.info[key] = analyse(insns, self.isa)
        except Exception as e:  # an exception cannot cross the C callback: keep it, stop, re-raise after
            self.error = e
            self.uc.emu_stop()
            return None
        rec = self.blocks[key] = [0, address + size if block.cond else 0, 0]
        return rec

    def counts(self, executions: Mapping | None = None) -> dict:
        """Class histogram over block executions (all, or {block: (runs, not taken)}), with conditional
        outcomes and the misprediction estimate."""
        if executions is None:
            executions = {k: (r[0], r[2]) for k, r in self.blocks.items()}
        total = dict.fromkeys(CLASSES + STRUCTURE, 0)
        for key, (n, not_taken) in executions.items():
            block = self.info[key]
            for k, v in block.hist.items():
                total[k] += v * n
            if block.cond:  # stopping at the return is a taken branch, hence taken = n - not_taken
                taken = n - not_taken
                if block.term == "b":
                    total["branch_taken"] += taken
                    total["branch_not_taken"] += not_taken
                else:  # a conditional POP {pc}: its load is in the histogram, the refill only when taken
                    total["pc_load"] += taken
                total["mispredict_est"] += min(taken, not_taken)
        return total

    def by_function(self, functions: list[tuple[int, int, str]]) -> dict:
        """Counts per function whose [start, end) holds the block's start ("?" when none does)."""
        import bisect
        starts = [f[0] for f in functions]
        groups: dict[str, dict] = {}
        for key, r in self.blocks.items():
            i = bisect.bisect_right(starts, key[0]) - 1
            name = functions[i][2] if i >= 0 and key[0] < functions[i][1] else "?"
            groups.setdefault(name, {})[key] = (r[0], r[2])
        return {name: self.counts(e) for name, e in groups.items()}


# ---------------------------------------------------------------- building test kernels
def build_elf(sources: Sequence[str | Path], core: str = "cortex-m4", flags: Sequence[str] = ("-O2",),
              entry: str | None = None, name: str = "a.elf", cache: str | Path | None = None) -> Path:
    """Compile freestanding C/assembly into a bare ELF for `core` (cbuild.build, cached): arm-none-eabi-gcc or
    aarch64-linux-gnu-gcc when on PATH, else clang from `pip install ziglang`. Raises FileNotFoundError when
    neither exists.

    The counts depend on the compiler: gcc 12 -O2 does not vectorise the AArch64 dot product, clang does."""
    from ..cbuild import build
    # -e: GNU ld falls back to an address for an unknown entry; lld only warns. Nothing runs from it.
    common = ["-ffreestanding", "-nostdlib", "-fno-builtin", "-static", *flags, f"-Wl,-e,{entry or '0'}",
              "-Wl,--no-gc-sections"]  # zig links with --gc-sections, which would drop every function
    return build(sources, name, cc=compiler(core), flags=common, cache=cache)


def compiler(core: str) -> list[str]:
    """The command (with its target flags) that build_elf compiles for `core` with."""
    import shutil
    import sys
    model = CORES[core]
    if model.isa == "thumb":
        fpu = {"cortex-m4": "fpv4-sp-d16", "cortex-m7": "fpv5-d16", "cortex-m33": "fpv5-sp-d16"}[core]
        if shutil.which("arm-none-eabi-gcc"):
            cmd = ["arm-none-eabi-gcc", f"-mcpu={core}", "-mthumb", "-mfloat-abi=hard", f"-mfpu={fpu}"]
        else:
            zfpu = {"cortex-m4": "vfp4d16sp", "cortex-m7": "fp_armv8d16", "cortex-m33": "fp_armv8d16sp"}[core]
            cmd = [sys.executable, "-m", "ziglang", "cc", "-target", "thumb-freestanding-eabihf",
                   f"-mcpu={core.replace('-', '_')}+{zfpu}"]  # zig's CPU models leave the FPU out
    else:
        if shutil.which("aarch64-linux-gnu-gcc"):
            cmd = ["aarch64-linux-gnu-gcc", f"-mcpu={core}"]
        else:
            cmd = [sys.executable, "-m", "ziglang", "cc", "-target", "aarch64-freestanding",
                   f"-mcpu={core.replace('-', '_')}"]
    if cmd[0] == sys.executable:
        try:
            import ziglang  # noqa: F401
        except ImportError as e:
            apt = "gcc-arm-none-eabi" if model.isa == "thumb" else "gcc-aarch64-linux-gnu"
            raise FileNotFoundError(f"no compiler for {core}: apt-get install {apt}, or pip install ziglang") from e
    return cmd
