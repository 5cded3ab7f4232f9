"""Energy per inference: power monitors that record a trace while a benchmark runs, and the energy over its runs.

Torch-free (numpy and the standard library; smbus2 for the INA sensors), so it runs on the Pi beside latency.py.
Traces are stamped with time.perf_counter(), the clock the benchmark marks its runs with, so the (t_start, t_end)
of a run indexes the trace directly. On Linux CPython reads it from CLOCK_MONOTONIC, as time.monotonic (Python
docs of both), so a logger in another process on the same machine can share it; an external meter's log needs a
clock offset instead. Typical use:

    with PMICMonitor() as mon:
        (idle,), _ = run_windows(lambda: time.sleep(2.0), 1)
        windows, runs = run_windows(timed.run, 500)
    energy_per_inference(mon.trace, windows, idle=idle, runs_per_window=runs)

A sampling thread costs the Pi some CPU of its own; it runs through the idle window too, so idle subtraction
removes most of it.
"""
from __future__ import annotations

import csv
import re
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import numpy as np


@dataclass(frozen=True)
class PowerTrace:
    """Power samples: `t` in seconds on the perf_counter clock, strictly increasing, and `watts`."""
    t: np.ndarray
    watts: np.ndarray
    source: str = "trace"

    def __post_init__(self):
        t, w = np.asarray(self.t, dtype=np.float64), np.asarray(self.watts, dtype=np.float64)
        object.__setattr__(self, "t", t)
        object.__setattr__(self, "watts", w)
        if t.ndim != 1 or t.shape != w.shape or len(t) == 0:
            raise ValueError(f"{self.source}: t and watts must be 1-D, non-empty, of one length: "
                             f"{t.shape}, {w.shape}")
        if not (np.isfinite(t).all() and np.isfinite(w).all()):
            raise ValueError(f"{self.source}: non-finite time or power")
        back = np.flatnonzero(np.diff(t) <= 0)
        if len(back):
            i = back[0] + 1
            raise ValueError(f"{self.source}: timestamps must increase strictly; sample {i} at {t[i]} "
                             f"follows {t[i - 1]}")

    def __len__(self) -> int:
        return len(self.t)

    def between(self, t0: float, t1: float) -> PowerTrace:
        """The samples inside [t0, t1] and one neighbour on each side, so the edges can be interpolated."""
        if self.t[-1] < t0 or self.t[0] > t1:
            raise ValueError(f"{self.source}: covers [{self.t[0]:.3f}, {self.t[-1]:.3f}] s, not the run "
                             f"[{t0:.3f}, {t1:.3f}] s; check the clock offset")
        i = max(np.searchsorted(self.t, t0, "right") - 1, 0)
        j = np.searchsorted(self.t, t1, "left") + 1
        return PowerTrace(self.t[i:j], self.watts[i:j], self.source)


class PowerMonitor(ABC):
    """Records power between start() and stop(); `with monitor:` leaves the trace in `monitor.trace`."""
    name = "power"
    trace: PowerTrace | None = None

    @abstractmethod
    def start(self) -> None:
        """Begin recording."""

    @abstractmethod
    def stop(self) -> PowerTrace:
        """End recording and return the trace."""

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.trace = self.stop()


class SampledMonitor(PowerMonitor):
    """A sensor polled every `period_s` by a background thread; subclasses read it in read_watts()."""

    def __init__(self, period_s: float):
        if period_s <= 0:
            raise ValueError(f"{self.name}: period_s must be positive, got {period_s}")
        self.period_s = period_s
        self._thread: threading.Thread | None = None

    @abstractmethod
    def read_watts(self) -> float:
        """One power reading, in watts."""

    def _sample(self):
        t0 = time.perf_counter()
        w = float(self.read_watts())
        # stamped mid-read: a slow read (vcgencmd takes milliseconds) would otherwise lag its value
        self._t.append(0.5 * (t0 + time.perf_counter()))
        self._w.append(w)

    def _loop(self):
        due = time.perf_counter()
        while True:
            due = max(due + self.period_s, time.perf_counter())  # when late, skip the missed slots, no burst
            if self._halt.wait(due - time.perf_counter()):
                return
            try:
                self._sample()
            except Exception as e:  # handed to stop(), which raises it in the caller's thread
                self._error = e
                return

    def start(self):
        if self._thread is not None:
            raise RuntimeError(f"{self.name}: already started")
        self._t, self._w, self._error = [], [], None
        self._sample()  # here, not in the thread: a missing sensor fails now, and the trace starts before any run
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"power-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> PowerTrace:
        if self._thread is None:
            raise RuntimeError(f"{self.name}: not started")
        self._halt.set()
        self._thread.join()
        self._thread = None
        if self._error is not None:
            raise RuntimeError(f"{self.name}: sampling failed: {self._error}") from self._error
        self._sample()  # the trace ends after the last run, so every window lies inside it
        return PowerTrace(np.array(self._t), np.array(self._w), self.name)


class Reading(NamedTuple):
    """One INA reading, for checking the wiring and calibration."""
    volts: float
    amps: float
    watts: float


def _smbus(number: int):
    try:
        from smbus2 import SMBus
    except ImportError as e:
        raise ImportError("the INA monitors need smbus2 (pip install smbus2) and I2C enabled (raspi-config)") from e
    return SMBus(number)


def _swap16(word: int) -> int:
    return (word & 0xFF) << 8 | word >> 8


def _signed16(value: int) -> int:
    return value - 0x10000 if value & 0x8000 else value


class _INAMonitor(SampledMonitor):
    """A TI INA current/power monitor on I2C: 16-bit registers, sent most significant byte first."""

    def __init__(self, bus, address: int, period_s: float):
        super().__init__(period_s)
        self.address = address
        self._own_bus = isinstance(bus, int)
        self.bus = _smbus(bus) if self._own_bus else bus

    # SMBus read/write word put the first byte on the wire in the low byte (Linux Documentation/i2c/
    # smbus-protocol.rst, which notes the swapped variant); the INA sends and expects the MSB first.
    def read_register(self, register: int) -> int:
        return _swap16(self.bus.read_word_data(self.address, register))

    def write_register(self, register: int, value: int):
        self.bus.write_word_data(self.address, register, _swap16(value))

    def close(self):
        """Release the I2C bus if this monitor opened it."""
        if self._own_bus:
            self.bus.close()


class INA219Monitor(_INAMonitor):
    """TI INA219 across an external shunt, calibrated from its resistance and the largest expected current.

    Register map and equations from the datasheet, SBOS448G (Dec 2015), sections 8.5.1 and 8.6: configuration
    0x00, shunt voltage 0x01, bus voltage 0x02 (bits 15..3, 4 mV LSB; bit 1 CNVR, bit 0 OVF), power 0x03,
    current 0x04, calibration 0x05.
    """
    name = "ina219"
    CONFIG, BUS_VOLTAGE, POWER, CURRENT, CALIBRATION = 0x00, 0x02, 0x03, 0x04, 0x05

    def __init__(self, bus=1, address: int = 0x40, shunt_ohms: float = 0.1, max_current_a: float = 3.2,
                 period_s: float = 0.002):
        shunt_v = round(shunt_ohms * max_current_a, 9)  # 0.1 ohm * 3.2 A is 0.32 V, not 0.32000000000000006
        ranges = (0.04, 0.08, 0.16, 0.32)  # PGA /1, /2, /4, /8 (section 8.6.2.1, PG bits)
        if shunt_v > ranges[-1]:
            raise ValueError(f"{max_current_a} A through {shunt_ohms} ohm drops {shunt_v * 1e3:.0f} mV, "
                             "beyond the INA219's 320 mV shunt range")
        # section 8.5.1: Current_LSB = max_current_a / 2^15 (the finest LSB that spans it in 15 bits) and
        # Cal = trunc(0.04096 / (Current_LSB * shunt_ohms)); rounding first keeps float error from truncating
        # an exact integer one count low, and bit 0 (FS0) is void (8.6.4.1)
        cal = int(round(0.04096 / (max_current_a / 2**15 * shunt_ohms), 6)) & 0xFFFE
        if not 0 < cal <= 0xFFFE:
            raise ValueError(f"shunt_ohms={shunt_ohms}, max_current_a={max_current_a}: calibration {cal} "
                             "does not fit the 16-bit register")
        super().__init__(bus, address, period_s)
        self.calibration = cal
        self.current_lsb = 0.04096 / (cal * shunt_ohms)  # the LSB the truncated calibration actually gives
        self.power_lsb = 20 * self.current_lsb  # Power_LSB = 20 Current_LSB (8.5.1)
        pga = next(i for i, r in enumerate(ranges) if shunt_v <= r)
        # 32 V bus range, the PGA, 12-bit 532 us shunt and bus conversions, continuous: 0x399F (the power-on
        # default) at PGA /8
        self.config = 0x2000 | pga << 11 | 0x3 << 7 | 0x3 << 3 | 0x7
        self.write_register(self.CONFIG, self.config)
        self.write_register(self.CALIBRATION, self.calibration)

    def _bus_register(self) -> int:
        bus = self.read_register(self.BUS_VOLTAGE)
        if bus & 1:
            raise OverflowError(f"{self.name} at {self.address:#x}: math overflow (OVF): the current exceeds "
                                "max_current_a, so current and power are meaningless")
        return bus

    def read_watts(self) -> float:
        self._bus_register()  # one more transfer per sample, so an overflow cannot pass as a reading
        return self.read_register(self.POWER) * self.power_lsb

    def read(self) -> Reading:
        volts = (self._bus_register() >> 3) * 4e-3
        amps = _signed16(self.read_register(self.CURRENT)) * self.current_lsb
        return Reading(volts, amps, self.read_register(self.POWER) * self.power_lsb)


class INA260Monitor(_INAMonitor):
    """TI INA260 with its integrated shunt: fixed LSBs, no calibration.

    Register map from the datasheet, SBOS656C (Dec 2016), section 8.6: configuration 0x00, current 0x01 (signed,
    1.25 mA LSB), bus voltage 0x02 (1.25 mV LSB), power 0x03 (10 mW LSB), manufacturer ID 0xFE (0x5449, "TI").
    `config` is written to 0x00 when given; None leaves the chip's configuration as it is.
    """
    name = "ina260"
    CONFIG, CURRENT, BUS_VOLTAGE, POWER, MANUFACTURER_ID = 0x00, 0x01, 0x02, 0x03, 0xFE

    def __init__(self, bus=1, address: int = 0x40, period_s: float = 0.002, config: int | None = None):
        super().__init__(bus, address, period_s)
        maker = self.read_register(self.MANUFACTURER_ID)
        if maker != 0x5449:
            raise RuntimeError(f"no INA260 at {address:#x}: manufacturer ID {maker:#06x}, expected 0x5449")
        if config is not None:
            self.write_register(self.CONFIG, config)

    def read_watts(self) -> float:
        return self.read_register(self.POWER) * 10e-3

    def read(self) -> Reading:
        return Reading(self.read_register(self.BUS_VOLTAGE) * 1.25e-3,
                       _signed16(self.read_register(self.CURRENT)) * 1.25e-3, self.read_watts())


# `vcgencmd pmic_read_adc` on a Pi 5 prints one channel per line, e.g. "  VDD_CORE_A current(7)=2.35880000A" and
# "  VDD_CORE_V volt(15)=0.87140000V" (captures in Jeff Geerling's "Overclocking Raspberry Pi 5" post and in
# a bug report of the zeus project, github.com/ml-energy/zeus, number 273). Twelve rails carry both channels:
# 3V7_WL_SW, 3V3_SYS, 1V8_SYS, DDR_VDD2, DDR_VDDQ, 1V1_SYS, 0V8_SW (0V8_SYS in 2023 firmware), VDD_CORE, 3V3_DAC,
# 3V3_ADC, 0V8_AON, HDMI; EXT5V and BATT have a voltage only. The channel index is optional here, and so are the
# line breaks (the text is NUL-separated when read from the firmware mailbox directly, as zeus does).
_PMIC_CHANNEL = re.compile(r"([A-Za-z0-9_]+)_([AV])(?:\s+[a-z]+\(\d+\))?\s*=\s*"
                           r"([-+]?\d*\.?\d+(?:[eE][-+]?\d+)?)([AV]?)")


def parse_pmic_adc(text: str) -> dict[str, tuple[float, float]]:
    """The rails of `vcgencmd pmic_read_adc` output that report both channels: name -> (volts, amps)."""
    channels: dict[str, dict[str, float]] = {}
    for name, kind, value, unit in _PMIC_CHANNEL.findall(text):
        if unit in ("", kind) and np.isfinite(float(value)):
            channels.setdefault(name, {})[kind] = float(value)
    return {name: (c["V"], c["A"]) for name, c in channels.items() if c.keys() == {"A", "V"}}


def _vcgencmd_pmic() -> str:
    try:
        return subprocess.run(["vcgencmd", "pmic_read_adc"], capture_output=True, text=True, check=True,
                              timeout=5).stdout
    except FileNotFoundError as e:
        raise RuntimeError("vcgencmd not found: PMICMonitor needs a Raspberry Pi 5 with Raspberry Pi OS") from e
    except subprocess.CalledProcessError as e:
        output = (e.stdout + e.stderr).strip()
        raise RuntimeError(f"vcgencmd pmic_read_adc failed ({e.returncode}): {output}") from e


class PMICMonitor(SampledMonitor):
    """Raspberry Pi 5: the sum of V*I over the PMIC's rails (all twelve, or `rails`), from `vcgencmd pmic_read_adc`.

    The rails are the PMIC's outputs: the sum leaves out its conversion losses and the 5 V loads (USB), so it
    reads below a meter on the supply; it suits comparing models on one board. Each sample spawns vcgencmd and
    waits on the firmware, so expect at most some tens of samples a second: time one long window of back-to-back
    runs, not single runs. `runner` returns the command's text (the tests pass a fake).
    """
    name = "pmic"

    def __init__(self, period_s: float = 0.1, rails: Sequence[str] | None = None,
                 runner: Callable[[], str] = _vcgencmd_pmic):
        super().__init__(period_s)
        self.rails = None if rails is None else tuple(rails)
        self.runner = runner

    def read_watts(self) -> float:
        text = self.runner()
        rails = parse_pmic_adc(text)
        if not rails:
            raise RuntimeError("no rail with both a current and a voltage in `vcgencmd pmic_read_adc` output "
                               f"(it needs a Raspberry Pi 5): {text.strip()[:200]!r}")
        if self.rails is not None:
            missing = sorted(set(self.rails) - set(rails))
            if missing:
                raise RuntimeError(f"PMIC rails {missing} not reported; it has {sorted(rails)}")
            rails = {r: rails[r] for r in self.rails}
        return sum(v * a for v, a in rails.values())


_TIME_NAMES, _WATT_NAMES = ("timestamp", "time", "t"), ("watts", "power", "w")
_VOLT_NAMES, _AMP_NAMES = ("volts", "voltage", "v"), ("amps", "current", "a")
# a unit in brackets or a _unit suffix: "Time (s)", "power [mW]", "current_ma"
_HEADER = re.compile(r"(?P<name>.+?)\s*(?:[(\[]\s*(?P<unit>[^)\]]*?)\s*[)\]]|_(?P<suffix>[mun]?[swva]))?", re.I)
_PREFIX = {"": 1.0, "m": 1e-3, "u": 1e-6, "µ": 1e-6, "n": 1e-9}


def _column(header: list[str], given: str | None, names: tuple[str, ...], base: str, where: str):
    """(index, scale to SI) of the column named `given`, or else of the first header matching `names`; or None."""
    for i, cell in enumerate(header):
        m = _HEADER.fullmatch(cell.strip())
        if m is None:
            continue
        name = m["name"].lower()
        if given.lower() in (cell.strip().lower(), name) if given else name in names:
            unit = (m["unit"] or m["suffix"] or base).lower()
            if unit[-1:] != base or unit[:-1] not in _PREFIX:
                raise ValueError(f"{where}: column {cell.strip()!r} has unit {unit!r}, not a unit of {base!r}")
            return i, _PREFIX[unit[:-1]]
    if given:
        raise ValueError(f"{where}: no column {given!r}; columns: {', '.join(header)}")
    return None


def load_power_log(path: str | Path, time_col: str | None = None, watts_col: str | None = None,
                   volts_col: str | None = None, amps_col: str | None = None, offset_s: float = 0.0) -> PowerTrace:
    """An external power meter's CSV log as a trace on the benchmark's clock.

    The columns are found by name (timestamp/time/t, watts/power/W, volts/voltage/V, amps/current/A, any case)
    unless given; a unit in the header scales them ("Time (ms)", "power [mW]", "current_ma"). Power is the watts
    column, or volts times amps (also when volts_col or amps_col is given). Comma, semicolon or tab separated;
    blank lines and lines starting with # are skipped. offset_s is added to the timestamps: perf_counter() minus
    the meter's time at one instant.
    """
    path = Path(path)
    numbered = [(n, line) for n, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), 1)
                if line.strip() and not line.lstrip().startswith("#")]
    if not numbered:
        raise ValueError(f"{path}: empty file: no header line")
    delimiter = next((d for d in "\t;," if d in numbered[0][1]), ",")
    header, *rows = csv.reader((line for _, line in numbered), delimiter=delimiter)
    line_of = [n for n, _ in numbered[1:]]
    if not rows:
        raise ValueError(f"{path}: no data rows after the header")
    columns = f"columns: {', '.join(header)}"
    tcol = _column(header, time_col, _TIME_NAMES, "s", str(path))
    if tcol is None:
        raise ValueError(f"{path}: no time column (tried {', '.join(_TIME_NAMES)}; pass time_col=); {columns}")
    wcol = None if volts_col or amps_col else _column(header, watts_col, _WATT_NAMES, "w", str(path))
    cols = [tcol, wcol]
    if wcol is None:
        cols[1:] = (_column(header, volts_col, _VOLT_NAMES, "v", str(path)),
                    _column(header, amps_col, _AMP_NAMES, "a", str(path)))
        if None in cols:
            raise ValueError(f"{path}: needs a power column ({', '.join(_WATT_NAMES)}) or voltage and current "
                             f"columns ({', '.join(_VOLT_NAMES)} and {', '.join(_AMP_NAMES)}); {columns}")
    values = np.empty((len(rows), len(cols)))
    for r, row in enumerate(rows):
        if len(row) <= max(i for i, _ in cols):
            raise ValueError(f"{path}, line {line_of[r]}: {len(row)} fields, the header has {len(header)}")
        for c, (i, scale) in enumerate(cols):
            try:
                x = float(row[i])
            except ValueError:
                x = np.nan
            if not np.isfinite(x):
                raise ValueError(f"{path}, line {line_of[r]}: {header[i].strip()!r} is {row[i]!r}, "
                                 "not a finite number")
            values[r, c] = x * scale
    t = values[:, 0]
    bad = np.flatnonzero(np.diff(t) <= 0)
    if len(bad):
        k = bad[0] + 1
        what = "repeats the one on" if t[k] == t[k - 1] else "goes back in time from"
        raise ValueError(f"{path}, line {line_of[k]}: timestamp {rows[k][tcol[0]].strip()!r} {what} line "
                         f"{line_of[k - 1]}; the log must be sorted by time, without duplicates")
    watts = values[:, 1] if wcol is not None else values[:, 1] * values[:, 2]
    return PowerTrace(t + offset_s, watts, str(path))


class CSVLogMonitor(PowerMonitor):
    """An external meter logging to a CSV file during the run; stop() reads the log and keeps the run's span.

    For a log that only exists after the run (exported later), call load_power_log on it instead.
    """

    def __init__(self, path: str | Path, time_col: str | None = None, watts_col: str | None = None,
                 volts_col: str | None = None, amps_col: str | None = None, offset_s: float = 0.0):
        self.path = Path(path)
        self.name = f"csv:{self.path.name}"
        self.columns = dict(time_col=time_col, watts_col=watts_col, volts_col=volts_col, amps_col=amps_col,
                            offset_s=offset_s)
        self._t0: float | None = None

    def start(self):
        self._t0 = time.perf_counter()

    def stop(self) -> PowerTrace:
        if self._t0 is None:
            raise RuntimeError(f"{self.name}: not started")
        t0, self._t0 = self._t0, None
        return load_power_log(self.path, **self.columns).between(t0, time.perf_counter())


def run_windows(run: Callable[[], object], n: int, per_run: bool = False) -> tuple[list[tuple[float, float]], int]:
    """Call `run` n times back to back: the (t_start, t_end) perf_counter markers, and the runs in each window.

    One window around all n runs by default: the way to measure with a slow monitor (the PMIC), whose samples
    are too sparse for a single run; per_run=True marks each run. It also marks an idle window:
    run_windows(lambda: time.sleep(2.0), 1).
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    clock = time.perf_counter
    if not per_run:
        t0 = clock()
        for _ in range(n):
            run()
        return [(t0, clock())], n
    windows = []
    for _ in range(n):
        t0 = clock()
        run()
        windows.append((t0, clock()))
    return windows, 1


def _check_window(trace: PowerTrace, a: float, b: float):
    if not b > a:
        raise ValueError(f"window ({a}, {b}) must end after it starts")
    if a < trace.t[0] or b > trace.t[-1]:
        raise ValueError(f"window [{a:.3f}, {b:.3f}] s lies outside {trace.source} [{trace.t[0]:.3f}, "
                         f"{trace.t[-1]:.3f}] s; check the clock offset, or start the monitor before the runs")


def _integral(trace: PowerTrace, a: float, b: float) -> float:
    """Joules over [a, b]: trapezoids on the samples, the trace interpolated linearly at the window's edges."""
    inside = trace.t[np.searchsorted(trace.t, a, "right"):np.searchsorted(trace.t, b, "left")]
    ts = np.concatenate(([a], inside, [b]))
    ws = np.interp(ts, trace.t, trace.watts)
    return float(np.sum((ws[1:] + ws[:-1]) * np.diff(ts)) / 2)


def energy_per_inference(trace: PowerTrace, windows: Sequence[tuple[float, float]],
                         idle: float | tuple[float, float] = 0.0, runs_per_window: int | Sequence[int] = 1,
                         min_samples: int = 2) -> dict:
    """Joules per inference: the energy over the windows less the idle power times their durations, per run.

    windows: (t_start, t_end) on the trace's clock, each holding runs_per_window back-to-back runs (one count, or
    one per window). idle: the baseline in watts, or an idle (t_start, t_end) window whose mean power is the
    baseline; 0 gives gross energy. A window with fewer than min_samples samples inside is only interpolated:
    the result is then flagged `undersampled`, with advice in `warning`.
    """
    w = np.asarray(windows, dtype=np.float64)
    if w.ndim != 2 or w.shape[1] != 2 or len(w) == 0:
        raise ValueError(f"windows must be a non-empty list of (t_start, t_end), got shape {w.shape}")
    runs = np.broadcast_to(np.asarray(runs_per_window, dtype=np.int64), (len(w),))
    if (runs < 1).any():
        raise ValueError("runs_per_window must be at least 1")
    for a, b in w:
        _check_window(trace, a, b)
    if np.ndim(idle) == 0:
        idle_w = float(idle)
    else:
        _check_window(trace, *idle)
        idle_w = _integral(trace, *idle) / (idle[1] - idle[0])
    seconds = w[:, 1] - w[:, 0]
    gross = np.array([_integral(trace, a, b) for a, b in w])
    per_run = (gross - idle_w * seconds) / runs
    samples = np.searchsorted(trace.t, w[:, 1], "right") - np.searchsorted(trace.t, w[:, 0], "left")
    undersampled = bool(samples.min() < min_samples)
    warning = None
    if undersampled:
        period = float(np.median(np.diff(trace.t))) if len(trace) > 1 else float("nan")
        warning = (f"{trace.source}: {int(samples.min())} sample(s) in a {seconds.min() * 1e3:.1f} ms window at "
                   f"one sample per {period * 1e3:.1f} ms: the energy is interpolated, not measured. Time one long "
                   "window of back-to-back runs instead (run_windows(run, n)), lasting many sample periods.")
    return dict(joules_per_inference=float((per_run * runs).sum() / runs.sum()),
                joules_std=float(per_run.std(ddof=1)) if len(w) > 1 else 0.0,
                joules_min=float(per_run.min()), joules_max=float(per_run.max()),
                active_w=float(gross.sum() / seconds.sum()), idle_w=idle_w,
                windows=len(w), runs=int(runs.sum()), seconds=float(seconds.sum()),
                samples_in_windows=int(samples.sum()), min_samples_per_window=int(samples.min()),
                undersampled=undersampled, warning=warning)
