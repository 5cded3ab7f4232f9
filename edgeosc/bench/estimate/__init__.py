"""Board-free, deterministic estimates of generated firmware: emulate one inference per core, price it.

estimate_model() builds a firmware_models-style folder (export/c) for each target core, Thumb-2
for Cortex-M4/M7/M33 (one build per -mcpu) and freestanding AArch64 for Cortex-A53/A72, calls one
inference through the harness (th_init, th_load_tensor, th_infer, th_results) under unicorn, checks the
logits against the host build of the same C (so the counted computation is the right one), and turns the
instruction classes into cycles (cycles.CORES), latency and energy (devices.DEVICES) and cycles per MAC,
for the whole model (<name>_run) and for the fused attention cores alone (their calls, callees included).
core_scaling() does the same for the two attention cores alone as T and d_osc vary.

Estimates, not measurements: cycles.py states what each core table models (no caches, no wait states);
the counts depend on the compiler (arm-none-eabi-gcc / aarch64-linux-gnu-gcc when on PATH, else zig's
clang), which each result names. Builds are cached by the hash of their sources, flags and compiler.

The modules, each what its name says:
  build.py      the ELFs for each core and the host builds (cached), a generated model's sizes
  macs.py       MACs of an inference as the .tflite states them
  pricing.py    instruction classes -> cycles, latency, energy, cycles per MAC
  structs.py    the drivers' parameters as the target lays them out (ctypes mirrors)
  workloads.py  what runs: random calibrated firmware, the kernels' shapes and random data, a layer's inputs
  model.py      estimate_model: one inference of a generated firmware on each core
  streams.py    stream_hop, stream_cycles: a stream's hop against the window recomputed
  kernels.py    kernel_cycles: each builtin kernel, fast path against portable (harness/kernel_driver.c)
  cores.py      core_scaling, linear_hop_cycles: the attention cores alone (harness/core_driver.c)
"""
from ...cbuild import CORE_SOURCES, KERNEL_SOURCES, KERNELS
from .build import (ATTENTION, CFLAGS, ENTRY, INCLUDES, STREAM_ENTRY, build, cache_dir, generated_source,
                    host_logits, io_bytes, model_elf)
from .cores import core_scaling, linear_hop_cycles
from .kernels import kernel_cycles
from .macs import MACS_COUNTED, count_macs
from .model import DEFAULT_TARGETS, estimate_model
from .pricing import PEAK_MACS_PER_CYCLE, priced
from .streams import STREAM_KINDS, stream_cycles, stream_hop
from .workloads import default_kernel_shapes, kernel_case, layer_inputs, random_firmware

__all__ = ["ATTENTION", "CFLAGS", "CORE_SOURCES", "DEFAULT_TARGETS", "ENTRY", "INCLUDES", "KERNELS", "KERNEL_SOURCES",
           "MACS_COUNTED", "PEAK_MACS_PER_CYCLE", "STREAM_ENTRY", "STREAM_KINDS", "build", "cache_dir",
           "core_scaling", "count_macs", "default_kernel_shapes", "estimate_model", "generated_source", "host_logits",
           "io_bytes", "kernel_case", "kernel_cycles", "layer_inputs", "linear_hop_cycles", "model_elf", "priced",
           "random_firmware", "stream_cycles", "stream_hop"]
