"""Cycle model: emulated counts of hand-written loops equal their closed forms; C kernels match numpy."""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgeosc.bench import cycles as C
from edgeosc.bench import devices as D

DATA = Path(__file__).parent / "data" / "cycles"
_MISSING = [m for m in ("unicorn", "capstone", "elftools") if importlib.util.find_spec(m) is None]
_ZIG = importlib.util.find_spec("ziglang") is not None
needs_emulator = pytest.mark.skipif(bool(_MISSING), reason=f"not installed: {', '.join(_MISSING)} "
                                    "(pip install unicorn 'capstone>=5,<6' pyelftools)")
needs_thumb_cc = pytest.mark.skipif(
    not (shutil.which("arm-none-eabi-gcc") or _ZIG),
    reason="no Thumb compiler: apt-get install gcc-arm-none-eabi, or pip install ziglang")
needs_a64_cc = pytest.mark.skipif(
    not (shutil.which("aarch64-linux-gnu-gcc") or _ZIG),
    reason="no AArch64 compiler: apt-get install gcc-aarch64-linux-gnu, or pip install ziglang")


@pytest.fixture(scope="module")
def thumb(tmp_path_factory):
    out = tmp_path_factory.mktemp("thumb")
    return {"loops": C.build_elf([DATA / "loops_thumb.S"], "cortex-m4", name="loops.elf", cache=out),
            "c": C.build_elf([DATA / "dot_s8.c"], "cortex-m4", name="dot_s8.elf", cache=out)}


def _s32(value: int) -> int:
    """A register read back as a signed 32-bit int."""
    return int(np.uint32(value & 0xFFFF_FFFF).view(np.int32))


def _nonzero(counts):
    return {k: v for k, v in counts.items() if v}


@needs_emulator
@needs_thumb_cc
@pytest.mark.parametrize("n", [1, 7, 100])
def test_mla_loop_closed_form(thumb, n):
    """movs; n x (LDR, MLA, ADD, SUBS, BNE); mov; bx: every class count and the M4 cycles are exact."""
    a = np.arange(1, n + 1, dtype=np.int32)
    run = C.emulate(thumb["loops"], "mla_loop", ["a", n, 3], {"a": a}, core="cortex-m4")
    assert run.return_value == 3 * int(a.sum())
    assert _nonzero({k: run.counts_by_class[k] for k in C.CLASSES}) == _nonzero(
        {"alu": 2 * n + 2, "load": n, "mul": n, "branch_taken": n, "branch_not_taken": 1})
    assert run.instructions == 5 * n + 3
    assert run.counts_by_class["ls_pipelined"] == run.counts_by_class["addr_dep"] == 0
    assert run.counts_by_class["mispredict_est"] == min(n - 1, 1)
    assert run.counts_by_class["dual_pairs"] == 2 * n + 2  # (movs,ldr) (mla,add) (subs,bne) ... (mov,bx)
    # Cortex-M4 TRM Table 3-1: ALU 1, LDR 2, MLA 1, taken branch 1+P (P = 2), not taken 1
    assert run.cycles == (2 * n + 2) + 2 * n + n + 3 * n + 1 == 8 * n + 3


@needs_emulator
@needs_thumb_cc
@pytest.mark.parametrize("n", [1, 50])
def test_pipelined_and_dependent_loads(thumb, n):
    """Back-to-back LDRs save a cycle; an LDR addressed by the ADD just before it costs one more (M4 3.3.2)."""
    a = np.arange(2 * n, dtype=np.int32) - 17
    pair = C.emulate(thumb["loops"], "pair_loop", ["a", n], {"a": a}, core="cortex-m4")
    assert _s32(pair.return_value) == int((a[0::2] * a[1::2]).sum())
    assert pair.counts_by_class["load"] == 2 * n and pair.counts_by_class["ls_pipelined"] == n
    assert pair.cycles == 9 * n + 3  # per trip LDR 2 + LDR 1 + MLA + ADD + SUBS + BNE 3
    dep = C.emulate(thumb["loops"], "dep_loop", ["a", n], {"a": a}, core="cortex-m4")
    assert _s32(dep.return_value) == int(a[:n].sum())
    assert dep.counts_by_class["addr_dep"] == n and dep.counts_by_class["load_use"] == n
    assert dep.instructions == 5 * n + 4
    assert dep.cycles == 9 * n + 4  # per trip ADD + LDR 2 + stall 1 + ADD + SUBS + BNE 3


@needs_emulator
@needs_thumb_cc
def test_c_kernels_match_numpy(thumb):
    rng = np.random.default_rng(0)
    a, b = rng.integers(-128, 128, (2, 1000), dtype=np.int8)
    run = C.emulate(thumb["c"], "dot_s8", ["a", "b", len(a)], {"a": a, "b": b}, core="cortex-m4")
    assert _s32(run.return_value) == int(a.astype(np.int32) @ b.astype(np.int32))
    k = run.counts_by_class
    assert k["load"] + 2 * k["ldm"] >= 2 * len(a) and k["mul"] + k["dsp"] >= len(a)
    assert run.cycles > run.instructions  # loads and taken branches cost more than one cycle on the M4

    rows, cols = 12, 40  # eight arguments: four in registers, four on the stack
    w = rng.integers(-128, 128, (rows, cols), dtype=np.int8)
    x = rng.integers(-128, 128, cols, dtype=np.int8)
    bias = rng.integers(-500, 500, rows, dtype=np.int32)
    run = C.emulate(thumb["c"], "matvec_s8", ["w", "x", "bias", "out", rows, cols, -5, -3],
                    {"w": w, "x": x, "bias": bias, "out": np.zeros(rows, np.int32)}, core="cortex-m4")
    want = (w.astype(np.int32) @ (x.astype(np.int32) - 5) + bias) * -3
    np.testing.assert_array_equal(run.outputs["out"], want)
    np.testing.assert_array_equal(run.outputs["w"], w)  # inputs come back unchanged


@needs_emulator
@needs_thumb_cc
def test_deterministic_and_count_only(thumb):
    rng = np.random.default_rng(1)
    bufs = {"a": rng.integers(-128, 128, 300, dtype=np.int8), "b": rng.integers(-128, 128, 300, dtype=np.int8)}
    runs = [C.emulate(thumb["c"], "dot_s8", ["a", "b", 300], bufs, core="cortex-m4") for _ in range(2)]
    assert runs[0].counts_by_class == runs[1].counts_by_class and runs[0].cycles == runs[1].cycles
    bare = C.emulate(thumb["c"], "dot_s8", ["a", "b", 300], bufs, core=None)
    assert bare.cycles is None and bare.counts_by_class == runs[0].counts_by_class
    m7 = C.cycles(bare.counts_by_class, "cortex-m7")
    assert 0 < m7 < runs[0].cycles  # dual issue and single-cycle loads


@needs_emulator
@needs_thumb_cc
def test_fpu_classes_and_errors(thumb):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 64)).astype(np.float32)
    run = C.emulate(thumb["c"], "dot_f32", ["a", "b", 64], {"a": a, "b": b}, core="cortex-m4")
    assert run.counts_by_class["fp_mac"] + run.counts_by_class["fp"] >= 64
    with pytest.raises(ValueError, match="a64"):
        C.emulate(thumb["c"], "dot_s8", ["a", "b", 1], {"a": a, "b": b}, core="cortex-a53")
    with pytest.raises(KeyError):
        C.emulate(thumb["c"], "no_such_function", [], core="cortex-m4")


@needs_emulator
@needs_a64_cc
def test_aarch64_dot_and_cores(tmp_path):
    rng = np.random.default_rng(3)
    a, b = rng.integers(-128, 128, (2, 2048), dtype=np.int8)
    want = int(a.astype(np.int32) @ b.astype(np.int32))
    est = {}
    for core in ("cortex-a53", "cortex-a72"):
        elf = C.build_elf([DATA / "dot_s8.c"], core, name=f"{core}.elf", cache=tmp_path)
        run = C.emulate(elf, "dot_s8", ["a", "b", len(a)], {"a": a, "b": b}, core=core)
        assert _s32(run.return_value) == want
        assert run.instructions > 0 and run.cycles > 0
        est[core] = run.cycles
    assert est["cortex-a72"] < est["cortex-a53"]  # 3-wide out-of-order vs 2-wide in-order


def test_cycle_tables():
    counts = dict.fromkeys(C.CLASSES + C.STRUCTURE, 0)
    counts.update(alu=10, load=4, ls_pipelined=1, branch_taken=2, branch_not_taken=1, ldm=1, ldm_regs=3)
    assert C.instructions_in(counts) == 18
    assert C.cycles(counts, "cortex-m4") == 10 + 8 - 1 + 6 + 1 + 4
    assert C.cycles(counts, "cortex-m33") == C.cycles(counts, "cortex-m4")  # stated approximation
    assert C.cycles(counts, "cortex-a72") == pytest.approx(18 / 3)  # decode-bound here
    for model in C.CORES.values():
        assert model.source and model.isa in ("thumb", "a64")


def test_devices():
    d = D.DEVICES["stm32l4r5"]
    assert d.core == "cortex-m4" and d.clock_mhz == 120
    assert D.latency_ms(120_000, d) == pytest.approx(1.0)
    assert D.energy_uj(120_000, "stm32l4r5") == pytest.approx(d.active_mw)
    assert D.cycles_per_mac(1000, 250) == 4
    assert D.macs_per_second(120_000, 1e6, d) == pytest.approx(1e9)
    counts = dict.fromkeys(C.CLASSES + C.STRUCTURE, 0)
    counts["alu"] = 1_200_000
    e = D.estimate(counts, "stm32l4r5", macs=600_000)
    assert e.cycles == 1_200_000 and e.latency_ms == pytest.approx(10) and e.cycles_per_mac == 2
    assert e.nj_per_mac == pytest.approx(e.energy_uj * 1e3 / 600_000)
    with pytest.raises(KeyError):
        D.device("esp32")
    with pytest.raises(ValueError):
        D.cycles_per_mac(1, 0)
    for dev in D.DEVICES.values():
        assert dev.core in C.CORES and dev.active_mw > 0 and dev.source
