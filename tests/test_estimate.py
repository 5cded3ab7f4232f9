"""Board-free estimates: emulated firmware logits == TFLite Micro's, attention inside the model, determinism,
scopes that partition a run, and attention core cycles that grow with T and d_osc."""
from __future__ import annotations

import importlib.util
import shutil

import numpy as np
import pytest

from edgeosc.bench import cycles as C
from edgeosc.bench import estimate as E

_MISSING = [m for m in ("unicorn", "capstone", "elftools") if importlib.util.find_spec(m) is None]
if _MISSING:
    pytest.skip(f"not installed: {', '.join(_MISSING)} (pip install unicorn 'capstone>=5,<6' pyelftools)",
                allow_module_level=True)
_ZIG = importlib.util.find_spec("ziglang") is not None
_CC = {"thumb": bool(shutil.which("arm-none-eabi-gcc")) or _ZIG,
       "a64": bool(shutil.which("aarch64-linux-gnu-gcc")) or _ZIG}
TARGETS = tuple(t for t in E.DEFAULT_TARGETS if _CC[C.CORES[t].isa])
if not TARGETS:
    pytest.skip("no ARM compiler: apt-get install gcc-arm-none-eabi gcc-aarch64-linux-gnu, or pip install ziglang",
                allow_module_level=True)
FIRST = TARGETS[0]
SHAPE = dict(d_model=16, heads=2, blocks=1, n_frames=16, n_coeffs=10)  # d_h 8, T 16, d_osc 8


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Untrained, calibrated QAT nets of both kinds (the oscillator's direct core, which TFLite Micro runs) ->
    int8.tflite -> firmware folders; an input each."""
    from edgeosc.config import DIRECT_OSCILLATOR, ModelConfig
    root = tmp_path_factory.mktemp("estimate")
    out = {"work": root / "work"}
    for kind in ("oscillator", "softmax"):
        fw, name = E.random_firmware(ModelConfig(attention=kind, n_classes=3, **SHAPE, **DIRECT_OSCILLATOR),
                                     SHAPE["n_frames"], root)
        x = np.random.default_rng(1).integers(-128, 128, (1, SHAPE["n_frames"], SHAPE["n_coeffs"])).astype(np.int8)
        out[kind] = dict(dir=fw, name=name, tflite=root / f"{name}.tflite", x=x)
    return out


def _tflm(m) -> np.ndarray:
    pytest.importorskip("tflite_micro")
    from edgeosc.runtime import load
    return np.ravel(load(m["tflite"], "tflite-micro").run_raw(m["x"]))


@pytest.mark.parametrize("kind", ["oscillator", "softmax"])
def test_logits_match_tflite_micro_and_fields(tiny, kind):
    m = tiny[kind]
    want = _tflm(m)
    est = E.estimate_model(m["dir"], m["name"], m["x"], TARGETS, tiny["work"], expected=want)
    assert est["logits"] == want.tolist() and set(est["targets"]) == set(TARGETS)
    H, T, dh, d_osc = SHAPE["heads"], SHAPE["n_frames"], SHAPE["d_model"] // SHAPE["heads"], 8
    per_key = dh + 2 * d_osc + 1 + dh if kind == "oscillator" else 2 * dh  # qk, h, zr, row sum, out / qk, out
    assert est["macs"]["attention"] == SHAPE["blocks"] * H * T * T * per_key
    assert est["macs"]["total"] == sum(est["macs"]["by_kind"].values()) > est["macs"]["attention"]
    for core, t in est["targets"].items():
        whole, att = t["model"], t["attention"]
        assert att["functions"] == [f"edgeosc_{kind}_core_int8"] and att["calls"] == SHAPE["blocks"]
        assert 0 < att["cycles"] < whole["cycles"] and 0 < t["share"] < 1
        assert 0 < att["instructions"] < whole["instructions"]
        assert whole["instructions"] == sum(v for k, v in whole["counts"].items()
                                            if k not in C._NOT_INSTRUCTIONS)
        for priced in (whole, att):
            assert priced["cycles_per_mac"] > 1 / t["peak_macs_per_cycle"] and 0 < priced["mac_efficiency"] < 1
            assert priced["devices"] and all(d["latency_ms"] > 0 and d["energy_uj"] > 0 and d["nj_per_mac"] > 0
                                             for d in priced["devices"].values())
        assert t["by_function"][f"edgeosc_{kind}_core_int8"] > 0


def test_deterministic_and_host_checked(tiny):
    m = tiny["oscillator"]
    runs = [E.estimate_model(m["dir"], m["name"], m["x"], (FIRST,), tiny["work"]) for _ in range(2)]
    assert runs[0] == runs[1]
    if shutil.which("gcc") or shutil.which("cc"):
        assert runs[0]["verified_against"] == "host build"
    with pytest.raises(RuntimeError, match="emulated logits"):
        E.estimate_model(m["dir"], m["name"], m["x"], (FIRST,), tiny["work"], expected=np.zeros(3, np.int8) + 99)


def test_scopes_partition_a_run(tiny):
    """Per-function counts sum to the run; a scope holds its callees; nested scopes both count."""
    m = tiny["softmax"]
    elf = E.model_elf(m["dir"], m["name"], FIRST, tiny["work"])
    core, run_fn = "edgeosc_softmax_core_int8", f"{m['name']}_run"
    bufs = {"input": m["x"].ravel(), "output": np.zeros(3, np.int8)}
    run = C.emulate(elf, E.ENTRY, ["input", "output"], bufs, core=FIRST, scopes=(run_fn, core))
    assert run.scope_calls == {run_fn: 1, core: SHAPE["blocks"]}
    assert sum(C.instructions_in(c) for c in run.by_function.values()) == run.instructions
    inner = C.instructions_in(run.scoped[core])
    assert C.instructions_in(run.by_function[core]) < inner < C.instructions_in(run.scoped[run_fn]) < run.instructions
    alone = C.emulate(elf, E.ENTRY, ["input", "output"], bufs, core=FIRST, scopes=(core,))
    assert alone.scoped[core] == run.scoped[core] and alone.counts_by_class == run.counts_by_class
    top = C.emulate(elf, E.ENTRY, ["input", "output"], bufs, core=FIRST, scopes=(E.ENTRY,))
    assert top.scoped[E.ENTRY] == top.counts_by_class  # the called symbol itself: closed when the call ends


def test_core_scaling_grows_with_T_and_d_osc(tiny):
    rows = E.core_scaling((9, 17), (2, 8), core=FIRST, work_dir=tiny["work"])
    assert [(r["T"], r["d_osc"]) for r in rows] == [(9, 2), (9, 8), (17, 2), (17, 8)]
    by = {(r["T"], r["d_osc"]): r for r in rows}
    for d in (2, 8):
        assert by[17, d]["oscillator_cycles"] > by[9, d]["oscillator_cycles"] > 0
        assert by[17, d]["softmax_cycles"] > by[9, d]["softmax_cycles"] > 0
    for T in (9, 17):
        assert by[T, 8]["oscillator_cycles"] > by[T, 2]["oscillator_cycles"]
        assert by[T, 2]["softmax_fixedpoint_cycles"] > by[T, 2]["softmax_cycles"]  # the exp table saves work
    assert by[17, 2]["oscillator_linear_cycles"] > by[9, 2]["oscillator_linear_cycles"] > 0
    assert by[9, 2]["oscillator_linear_cycles"] == by[9, 8]["oscillator_linear_cycles"]  # d_osc 2 whatever the row's
    for r in rows:
        assert r["ratio"] == r["oscillator_cycles"] / r["softmax_cycles"]
        assert r["ratio_linear"] == r["oscillator_linear_cycles"] / r["softmax_cycles"]
        assert r["oscillator_latency_ms"] > 0 and r["softmax_energy_uj"] > 0


def test_stream_cycles_per_hop_is_fixed_for_the_oscillator_and_grows_for_softmax(tmp_path):
    from edgeosc.bench.estimate import stream_cycles
    from edgeosc.config import ModelConfig
    model = ModelConfig(d_osc=2, positive="taylor2", key_gate=True, form="linear", n_classes=3, **SHAPE)
    rows = {(r["kind"], r["window"]): r for r in stream_cycles(windows=(8, 24), work_dir=tmp_path, model=model)}
    osc, sm = rows["oscillator", 24], rows["softmax", 24]
    # the linear core's hop is O(1) whatever W (a random network per W: a few data-dependent branches move)
    assert rows["oscillator", 8]["per_hop_attention_cycles"] == pytest.approx(osc["per_hop_attention_cycles"], rel=0.02)
    # O(W): three times the keys, well over 1.5x the work (a query's fixed part, its softmax's reciprocal and the
    # requantizations, keeps it under 3x at these small windows)
    assert sm["per_hop_attention_cycles"] > 1.5 * rows["softmax", 8]["per_hop_attention_cycles"]
    for r in rows.values():
        assert r["recompute_cycles"] > 4 * r["per_hop_cycles"] and r["blocks"] == SHAPE["blocks"]
        assert r["stream_uj_per_s"] == pytest.approx(50 * r["per_hop_energy_uj"])


def test_shipped_firmware_fits_its_stack(tmp_path):
    """The deepest stack of the shipped networks' firmware, measured on the emulated Cortex-M4 (the stack is painted
    before the call), stays within the reserve of the firmware image's linker script: the emulator runs on a 1 MiB
    stack, so only this measurement sees a kernel whose locals outgrow the board's."""
    import dataclasses
    import re

    from edgeosc.config import ModelConfig
    if "cortex-m4" not in TARGETS:
        pytest.skip("no Thumb compiler")
    from edgeosc.cbuild import FIRMWARE
    ld = (FIRMWARE / "tools" / "mps2.ld").read_text()
    reserve = int(re.search(r"STACK_SIZE\s*=\s*DEFINED\(STACK_SIZE\)\s*\?\s*STACK_SIZE\s*:\s*(0x[0-9a-fA-F]+)",
                            ld)[1], 16)
    osc = ModelConfig()
    configs = {"oscillator": osc, "softmax": dataclasses.replace(
        osc, attention="softmax", d_osc=8, positive="relu2", key_gate=False, form="direct")}
    stacks = {}
    for kind, cfg in configs.items():
        fw, name = E.random_firmware(cfg, cfg.n_frames, tmp_path / kind)
        x = np.random.default_rng(1).integers(-128, 128, E.io_bytes(fw, name)[0]).astype(np.int8)
        est = E.estimate_model(fw, name, x, ("cortex-m4",), tmp_path / "work")
        stacks[kind] = est["targets"]["cortex-m4"]["stack_bytes"]
        fw, name = E.random_firmware(cfg, cfg.n_frames, tmp_path / f"{kind}-stream", window=cfg.n_frames)
        hop = E.stream_hop(fw, name, cfg.n_frames, work_dir=tmp_path / "work", hops=1)
        stacks[f"{kind} stream"] = hop["stack_bytes"]
    print(stacks, reserve)
    # every inference has frames (run, kernel, helpers): a measurement that broke would read 0
    assert all(256 < s <= reserve for s in stacks.values()), (stacks, reserve)


def test_sibling_projections_of_a_stream_run_as_one_call(tmp_path):
    """A stream's q, k and v (and the oscillator's anchors and gate) are one-row layers that read one input: code
    generation groups them (export/c/ops.py group_siblings) into one edgeosc_fc_group_int8 call per block, the later
    ones moved up; stream_hop then checks the emulated Cortex-M4's logits against the host build's."""
    from edgeosc.config import ModelConfig, model_of_kind
    osc = ModelConfig()
    for cfg, members in ((osc, 5), (model_of_kind(osc, "softmax"), 3)):
        fw, name = E.random_firmware(cfg, cfg.n_frames, tmp_path / cfg.attention, window=8)
        text = (fw / f"{name}_model.c").read_text()
        assert text.count(f"edgeosc_fc_group_int8({members},") == 2, text
        if "cortex-m4" in TARGETS:
            assert E.stream_hop(fw, name, 8, work_dir=tmp_path / "work", hops=1)["cycles"] > 0


@pytest.mark.parametrize("core", [t for t in ("cortex-m4", "cortex-a53") if t in TARGETS])
def test_driver_parameters_are_laid_out_as_the_target_compiler_lays_them(core, tmp_path):
    """The drivers' parameter structs as the estimator writes them (estimate/structs.py: the attention cores' ckernels
    mirrors laid out for the core, kernel_driver.c's Bench* structs mirrored by name) against the target compiler's
    sizeof and offsetof of every field: a field renamed, added or moved on either side fails to compile."""
    import ctypes
    import subprocess

    from edgeosc.bench.estimate import structs as S
    from edgeosc.cbuild import HARNESS, KERNELS
    from edgeosc.integer import ckernels as K

    def checks(c_name, layout):
        yield f"sizeof({c_name}) == {ctypes.sizeof(layout)}"
        for name, t in layout._fields_:
            yield f"offsetof({c_name}, {name}) == {getattr(layout, name).offset}"
            if issubclass(t, ctypes.Structure):  # a nested struct (Requant): its fields at their offsets
                yield from (f"offsetof({c_name}, {name}.{n}) == {getattr(layout, name).offset + getattr(t, n).offset}"
                            for n, _ in t._fields_)
    pairs = [(f"Edgeosc{m.__name__}", S.target_layout(m, core)) for m in (K.OscParams, K.SoftmaxParams, K.LinearParams)]
    pairs += [(s.__name__, s) for s in S.DRIVER_STRUCTS]
    lines = ["#include <stddef.h>", '#include "kernel_driver.c"', '#include "core_driver.c"']
    lines += [f"typedef char check_{i}[({c}) ? 1 : -1];" for i, c in enumerate(c for p in pairs for c in checks(*p))]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    run = subprocess.run([*C.compiler(core), "-std=c99", "-ffreestanding", "-Wall", "-Wextra", "-Werror",
                          "-Wno-unused-local-typedefs", f"-I{KERNELS}", f"-I{HARNESS}", "-c", str(src), "-o",
                          str(tmp_path / "layout.o")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
