import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from edgeosc.bench import power
from edgeosc.bench.power import (CSVLogMonitor, INA219Monitor, INA260Monitor, PMICMonitor, PowerTrace,
                                 SampledMonitor, energy_per_inference, load_power_log, parse_pmic_adc, run_windows)

DATA = Path(__file__).parent / "data" / "power"

# The recorded logs are synthetic, written by write_logs() (python tests/test_power.py): a board drawing its idle
# power, and its active power while inference runs, ramping linearly over RAMP_S at each edge, read by a meter
# with Gaussian noise and jittered sample times. The energies they must give follow from these constants alone.
RAMP_S = 0.002
# ina219_500hz.csv: an INA219 polled every 2 ms, stamped on the perf_counter clock; 12 runs of 37 ms, 23 ms apart
INA = dict(t0=5234.1, period=0.002, jitter=0.0003, idle_w=2.70, active_w=4.10, noise=0.02,
           idle=(5234.2, 5234.6), first=5234.70037, runs=12, run_s=0.037, gap_s=0.023, end=5235.62)
# usb_meter_100hz.csv: a USB meter's own clock (ms from 0), volts and milliamps; 100 runs back to back in 2 s
METER = dict(offset=5230.0, period=0.01, jitter=0.0, volts=5.08, idle_w=2.70, active_w=4.10, noise=0.02,
             idle=(5230.1, 5230.9), first=5231.00412, runs=100, run_s=0.020, end=5234.0)
# pmic_10hz.csv: the PMIC rail sum polled every 100 ms (jitter 10 ms); 250 runs back to back in 5 s
PMIC = dict(t0=8100.0, period=0.1, jitter=0.01, idle_w=1.20, active_w=2.35, noise=0.01,
            idle=(8100.3, 8102.8), first=8103.0171, runs=250, run_s=0.020, end=8110.0)


def ina_windows():
    starts = INA["first"] + np.arange(INA["runs"]) * (INA["run_s"] + INA["gap_s"])
    return [(s, s + INA["run_s"]) for s in starts]


def long_window(log):
    return [(log["first"], log["first"] + log["runs"] * log["run_s"])]


def net_joules(log, span_s):
    """True energy above idle of one window of the model lasting span_s: each ramp gives half the step."""
    return (log["active_w"] - log["idle_w"]) * (span_s - RAMP_S)


def metered(rng, log, t0, windows):
    """Jittered sample times from t0 to the log's end, and the board's power there as the meter reads it."""
    t = np.arange(t0, log["end"], log["period"])
    t = t + rng.uniform(-log["jitter"], log["jitter"], len(t))
    p = np.full_like(t, log["idle_w"])
    for a, b in windows:  # ramps up over RAMP_S from the window's start, down over RAMP_S to its end
        p += (log["active_w"] - log["idle_w"]) * np.clip((t - a) / RAMP_S, 0, 1) * np.clip((b - t) / RAMP_S, 0, 1)
    return t, p + log["noise"] * rng.standard_normal(len(t))


def write_logs(folder: Path = DATA):
    """Write the synthetic logs the tests read (seeded)."""
    folder.mkdir(parents=True, exist_ok=True)
    note = "# synthetic: written by write_logs() in tests/test_power.py, whose constants give the true energies\n"
    rng = np.random.default_rng(2024)
    t, w = metered(rng, INA, INA["t0"], ina_windows())
    rows = "".join(f"{a:.6f},{b:.4f}\n" for a, b in zip(t, w))
    (folder / "ina219_500hz.csv").write_text(note + "timestamp,watts\n" + rows)
    t, w = metered(rng, METER, METER["offset"], long_window(METER))
    v = METER["volts"] + 0.005 * rng.standard_normal(len(t))
    rows = "".join(f"{(a - METER['offset']) * 1e3:.1f};{b:.4f};{c / b * 1e3:.2f}\n" for a, b, c in zip(t, v, w))
    (folder / "usb_meter_100hz.csv").write_text(note + "Time (ms);Voltage (V);Current (mA)\n" + rows)
    t, w = metered(rng, PMIC, PMIC["t0"], long_window(PMIC))
    rows = "".join(f"{a:.6f},{b:.4f}\n" for a, b in zip(t, w))
    (folder / "pmic_10hz.csv").write_text(note + "t,W\n" + rows)


# --- energy on the recorded logs -------------------------------------------------------------------------------


def test_integral_is_exact_on_a_linear_trace_with_unaligned_windows():
    trace = PowerTrace([0.0, 1.0, 2.0, 3.0], [1.0, 3.0, 3.0, 1.0])
    # by hand: 0.5 s rising 2 -> 3 W, 1 s at 3 W, 0.5 s falling 3 -> 2 W
    r = energy_per_inference(trace, [(0.5, 2.5)])
    assert r["joules_per_inference"] == pytest.approx(5.5) and r["active_w"] == pytest.approx(2.75)
    r = energy_per_inference(trace, [(0.5, 2.5), (1.25, 1.75)], idle=1.0, runs_per_window=[2, 1])
    assert r["joules_per_inference"] == pytest.approx((5.5 - 2.0 + 1.5 - 0.5) / 3)
    assert r["joules_min"] == pytest.approx(1.0) and r["joules_max"] == pytest.approx(1.75)
    assert r["samples_in_windows"] == 2 and r["undersampled"]  # (1.25, 1.75) holds no sample


def test_ina_log_per_run_windows_give_the_known_energy():
    trace = load_power_log(DATA / "ina219_500hz.csv")
    truth = net_joules(INA, INA["run_s"])  # 0.049 J: 1.4 W over 35 ms
    for idle in (INA["idle"], INA["idle_w"]):  # measured over an idle window, or given
        r = energy_per_inference(trace, ina_windows(), idle=idle)
        # Worst case per window: each of a run's 4 ramp kinks costs the trapezoids at most
        # (1.4 W / RAMP_S) * (2 ms)^2 / 8 = 0.35 mJ, 2.9 % of 49 mJ, plus 0.4 % noise; the mean lands within 1.5 %.
        assert r["joules_per_inference"] == pytest.approx(truth, rel=0.015)
        assert truth * 0.965 < r["joules_min"] <= r["joules_max"] < truth * 1.035
        assert r["idle_w"] == pytest.approx(INA["idle_w"], rel=0.005)
        assert r["runs"] == r["windows"] == 12 and r["min_samples_per_window"] >= 17
        assert not r["undersampled"] and r["warning"] is None


def test_meter_log_needs_its_clock_offset():
    window = long_window(METER)
    with pytest.raises(ValueError, match="clock offset"):
        energy_per_inference(load_power_log(DATA / "usb_meter_100hz.csv"), window)
    trace = load_power_log(DATA / "usb_meter_100hz.csv", offset_s=METER["offset"])
    r = energy_per_inference(trace, window, idle=METER["idle"], runs_per_window=METER["runs"])
    # 4 kinks at <= 8.75 mJ each over a 2.8 J window: 1.25 %, plus 0.3 % noise and idle error
    assert r["joules_per_inference"] == pytest.approx(net_joules(METER, 2.0) / METER["runs"], rel=0.015)
    assert r["active_w"] == pytest.approx(METER["active_w"] - (METER["active_w"] - METER["idle_w"]) * RAMP_S / 2,
                                          rel=0.01)


def test_slow_pmic_log_one_long_window_not_single_runs():
    trace = load_power_log(DATA / "pmic_10hz.csv")
    r = energy_per_inference(trace, long_window(PMIC), idle=PMIC["idle"], runs_per_window=PMIC["runs"])
    # a 100 ms (+-10 ms) sample period blurs each edge by at most 1.15 W * 110 ms / 2 = 63 mJ; both edges make
    # 2.2 % of the 5.7 J window
    assert r["joules_per_inference"] == pytest.approx(net_joules(PMIC, 5.0) / PMIC["runs"], rel=0.025)
    assert not r["undersampled"] and r["samples_in_windows"] >= 45
    single = [(a, a + PMIC["run_s"]) for a in PMIC["first"] + PMIC["run_s"] * np.arange(PMIC["runs"])]
    r = energy_per_inference(trace, single, idle=PMIC["idle_w"])
    assert r["undersampled"] and r["min_samples_per_window"] == 0 and "one long window" in r["warning"]


def test_energy_rejects_bad_windows():
    trace = PowerTrace([0.0, 1.0], [1.0, 1.0], "log.csv")
    with pytest.raises(ValueError, match=r"outside log.csv \[0.000, 1.000\]"):
        energy_per_inference(trace, [(0.5, 1.5)])
    with pytest.raises(ValueError, match="end after"):
        energy_per_inference(trace, [(0.6, 0.5)])
    with pytest.raises(ValueError, match="outside"):
        energy_per_inference(trace, [(0.2, 0.5)], idle=(-1.0, 0.1))
    with pytest.raises(ValueError, match="runs_per_window"):
        energy_per_inference(trace, [(0.2, 0.5)], runs_per_window=0)


def test_run_windows_marks_runs_on_the_perf_counter_clock():
    calls = []
    before = time.perf_counter()
    windows, runs = run_windows(lambda: calls.append(time.perf_counter()), 5)
    assert runs == 5 and len(windows) == 1 and before <= windows[0][0] <= calls[0] and calls[-1] <= windows[0][1]
    windows, runs = run_windows(lambda: time.sleep(0.001), 4, per_run=True)
    assert runs == 1 and len(windows) == 4
    assert all(a < b <= c for (a, b), (c, _) in zip(windows, windows[1:])) and windows[0][1] - windows[0][0] >= 0.001
    trace = PowerTrace([windows[0][0] - 1, windows[-1][1] + 1], [3.0, 3.0])
    r = energy_per_inference(trace, windows, idle=1.0)
    assert r["joules_per_inference"] == pytest.approx(2.0 * r["seconds"] / 4)


# --- CSV logs ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, kwargs, scale_t, watts", [
    ("timestamp,watts\n0,2.5\n0.5,3\n", {}, 1, [2.5, 3.0]),
    ("time,power\n0,2.5\n0.5,3\n", {}, 1, [2.5, 3.0]),
    ("\ufeff# exported by some meter\nt,W\n\n0,2.5\n0.5,3\n", {}, 1, [2.5, 3.0]),
    ("Time (s),Power (W)\n0,2.5\n0.5,3\n", {}, 1, [2.5, 3.0]),
    ("time_ms,power_mw\n0,2500\n500,3000\n", {}, 1e-3, [2.5, 3.0]),
    ("t;V;A\n0;5;0.5\n0.5;5;0.6\n", {}, 1, [2.5, 3.0]),
    ("time,voltage,current,power\n0,5,0.5,9\n0.5,5,0.6,9\n", dict(volts_col="voltage"), 1, [2.5, 3.0]),
    ("Timestamp [s]\tVoltage [V]\tCurrent [mA]\n0\t5\t500\n0.5\t5\t600\n", {}, 1, [2.5, 3.0]),
    ("clock,vbus,ishunt\n0,5,0.5\n0.5,5,0.6\n", dict(time_col="clock", volts_col="vbus", amps_col="ishunt"), 1,
     [2.5, 3.0]),
])
def test_load_power_log_header_variants(tmp_path, text, kwargs, scale_t, watts):
    path = tmp_path / "log.csv"
    path.write_text(text, encoding="utf-8")
    trace = load_power_log(path, offset_s=100.0, **kwargs)
    assert np.allclose(trace.t, 100.0 + np.array([0.0, 0.5 if scale_t == 1 else 500 * scale_t]))
    assert np.allclose(trace.watts, watts) and trace.source == str(path)


@pytest.mark.parametrize("text, kwargs, match", [
    ("", {}, "empty file"),
    ("# a comment only\n\n", {}, "empty file"),
    ("time,watts\n", {}, "no data rows"),
    ("when,watts\n1,2\n", {}, "no time column.*columns: when, watts"),
    ("time,volume\n1,2\n", {}, "needs a power column"),
    ("time,volts\n1,5\n", {}, "needs a power column"),
    ("time,watts\n1,2\n", dict(time_col="clock"), "no column 'clock'"),
    ("Time (h),watts\n1,2\n", {}, "unit 'h'"),
    ("time,watts\n0,1\n1,abc\n", {}, "line 3: 'watts' is 'abc', not a finite number"),
    ("time,watts\n0,1\n1,nan\n", {}, "line 3: 'watts' is 'nan'"),
    ("time,watts\n0,1\n1\n", {}, "line 3: 1 fields"),
    ("time,watts\n0,1\n2,1\n1,1\n", {}, "line 4: timestamp '1' goes back in time from line 3"),
    ("time,watts\n0,1\n0,1\n", {}, "line 3: timestamp '0' repeats"),
])
def test_load_power_log_errors_name_the_file_and_problem(tmp_path, text, kwargs, match):
    path = tmp_path / "meter.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as err:
        load_power_log(path, **kwargs)
    assert str(path) in str(err.value)


def test_csv_log_monitor_keeps_the_span_of_the_run(tmp_path):
    # a meter on its own clock, 10 s behind perf_counter, logging every 10 ms around now
    now = time.perf_counter()
    t = np.arange(now - 5, now + 5, 0.01)
    path = tmp_path / "live.csv"
    path.write_text("time,watts\n" + "".join(f"{x - 10:.4f},3.0\n" for x in t))
    mon = CSVLogMonitor(path, offset_s=10.0)
    with mon:
        windows, runs = run_windows(lambda: time.sleep(0.02), 2)
    assert mon.name == "csv:live.csv" and 2 <= len(mon.trace) < 100
    assert mon.trace.t[0] <= windows[0][0] and mon.trace.t[-1] >= windows[0][1]
    assert energy_per_inference(mon.trace, windows, runs_per_window=runs)["active_w"] == pytest.approx(3.0)


# --- INA219 / INA260 against a fake bus -----------------------------------------------------------------------


class FakeBus:
    """An smbus2 stand-in holding each register as the chip sends it, MSB first; a word is LSB first on SMBus."""

    def __init__(self, registers: dict[int, int]):
        self.mem = {reg: value.to_bytes(2, "big") for reg, value in registers.items()}
        self.writes = []

    def read_word_data(self, address, register):
        assert address == 0x41
        return int.from_bytes(self.mem[register], "little")  # the first byte on the wire is the low byte

    def write_word_data(self, address, register, word):
        assert address == 0x41 and 0 <= word <= 0xFFFF
        self.mem[register] = word.to_bytes(2, "little")
        self.writes.append((register, self.mem[register]))


def test_ina219_calibration_and_config_writes():
    bus = FakeBus({})
    ina = INA219Monitor(bus, address=0x41, shunt_ohms=0.1, max_current_a=3.2)
    # eq. 1-2: trunc(0.04096 / (3.2 A / 2^15 * 0.1 ohm)) = trunc(4194.3) = 4194 = 0x1062, sent 0x10 then 0x62
    assert bus.writes == [(0x00, b"\x39\x9f"), (0x05, b"\x10\x62")]  # 320 mV, PGA /8: the power-on config
    assert ina.current_lsb == pytest.approx(0.04096 / (4194 * 0.1)) and ina.power_lsb == 20 * ina.current_lsb
    # the cases of a TI E2E answer on this equation: 0.1 ohm and 1 A or 2 A give 13421 and 6710 (both even)
    assert INA219Monitor(FakeBus({}), 0x41, 0.1, 1.0).calibration == 13421 & 0xFFFE
    assert INA219Monitor(FakeBus({}), 0x41, 0.1, 2.0).calibration == 6710
    low = FakeBus({})
    INA219Monitor(low, 0x41, shunt_ohms=0.01, max_current_a=4.0)  # 40 mV: PGA /1
    assert low.writes[0] == (0x00, b"\x21\x9f")
    with pytest.raises(ValueError, match="320 mV"):
        INA219Monitor(FakeBus({}), 0x41, shunt_ohms=0.1, max_current_a=4.0)


def test_ina219_reads_swap_bytes_and_scale():
    ina = INA219Monitor(FakeBus({}), address=0x41, shunt_ohms=0.1, max_current_a=3.2)
    bus_word = 1270 << 3 | 0b10  # 5.08 V in 4 mV steps from bit 3, the conversion-ready bit set
    current = round(-0.5 / ina.current_lsb) & 0xFFFF  # -0.5 A, two's complement
    ina.bus.mem.update({0x02: bus_word.to_bytes(2, "big"), 0x04: current.to_bytes(2, "big"),
                        0x03: round(2.54 / ina.power_lsb).to_bytes(2, "big")})
    volts, amps, watts = ina.read()
    assert volts == pytest.approx(5.08) and amps == pytest.approx(-0.5, abs=ina.current_lsb)
    assert watts == pytest.approx(2.54, abs=ina.power_lsb) and ina.read_watts() == watts
    ina.bus.mem[0x02] = (bus_word | 1).to_bytes(2, "big")  # math overflow flag
    with pytest.raises(OverflowError, match="max_current_a"):
        ina.read_watts()


def test_ina219_monitor_samples_the_power_register():
    ina = INA219Monitor(FakeBus({0x02: 1270 << 3}), address=0x41, period_s=0.002)
    ina.bus.mem[0x03] = (1300).to_bytes(2, "big")
    with ina:
        time.sleep(0.03)
    assert len(ina.trace) >= 3 and np.allclose(ina.trace.watts, 1300 * ina.power_lsb)
    assert ina.trace.source == "ina219"


def test_ina260_fixed_lsbs_and_identity():
    registers = {0xFE: 0x5449, 0x01: -1000 & 0xFFFF, 0x02: 4064, 0x03: 254}
    bus = FakeBus(registers)
    ina = INA260Monitor(bus, address=0x41)
    assert bus.writes == []  # no config given: the chip's own is kept
    volts, amps, watts = ina.read()
    assert volts == pytest.approx(5.08) and amps == pytest.approx(-1.25) and watts == pytest.approx(2.54)
    INA260Monitor(bus, address=0x41, config=0x6527)
    assert bus.writes == [(0x00, b"\x65\x27")]
    with pytest.raises(RuntimeError, match="no INA260 at 0x41: manufacturer ID 0x0000"):
        INA260Monitor(FakeBus({0xFE: 0}), address=0x41)


def test_ina_without_smbus2_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "smbus2", None)  # makes `import smbus2` fail
    with pytest.raises(ImportError, match="pip install smbus2"):
        INA260Monitor(bus=1)


# --- Raspberry Pi 5 PMIC -------------------------------------------------------------------------------------

PMIC_TEXT = (DATA / "pmic_read_adc.txt").read_text()
PMIC_TOTAL_W = 3.35551293  # sum of V * I over the 12 rails of pmic_read_adc.txt, by hand


def test_parse_pmic_pairs_rails_and_drops_voltage_only_channels():
    rails = parse_pmic_adc(PMIC_TEXT)
    assert len(rails) == 12 and "EXT5V" not in rails and "BATT" not in rails
    assert rails["VDD_CORE"] == (0.8714, 2.3588) and rails["3V7_WL_SW"] == (3.715746, 0.051245)
    assert sum(v * a for v, a in rails.values()) == pytest.approx(PMIC_TOTAL_W)
    assert parse_pmic_adc(PMIC_TEXT.replace("\n", "\x00")) == rails  # the mailbox's NUL-separated text
    assert parse_pmic_adc("VDD_CORE_V=0.8750V\nVDD_CORE_A=1.2340A\n") == {"VDD_CORE": (0.875, 1.234)}
    assert parse_pmic_adc("X_A current(1)=1.0V\nX_V volt(2)=1.0V\nY_A current(3)=nanA\nY_V volt(4)=1V\n") == {}


def test_pmic_monitor_with_a_fake_runner():
    calls = []
    mon = PMICMonitor(period_s=0.005, runner=lambda: calls.append(1) or PMIC_TEXT)
    with mon:
        time.sleep(0.04)
    assert len(mon.trace) == len(calls) >= 3 and np.allclose(mon.trace.watts, PMIC_TOTAL_W)
    core = PMICMonitor(rails=["VDD_CORE"], runner=lambda: PMIC_TEXT)
    assert core.read_watts() == pytest.approx(2.3588 * 0.8714)
    with pytest.raises(RuntimeError, match=r"\['DDR'\] not reported"):
        PMICMonitor(rails=["VDD_CORE", "DDR"], runner=lambda: PMIC_TEXT).read_watts()
    pi4 = PMICMonitor(runner=lambda: 'error=1 error_msg="Command not registered"\n')
    with pytest.raises(RuntimeError, match="Raspberry Pi 5"):
        pi4.start()  # the first sample is taken in start(), so a board without the PMIC fails at once


def test_pmic_without_vcgencmd(monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(RuntimeError, match="vcgencmd not found"):
        PMICMonitor().read_watts()


def test_vcgencmd_failure_reports_its_output(monkeypatch):
    def fail(*args, **kwargs):
        raise subprocess.CalledProcessError(255, args[0], output="", stderr="VCHI initialization failed")
    monkeypatch.setattr(power.subprocess, "run", fail)
    with pytest.raises(RuntimeError, match=r"failed \(255\): VCHI initialization failed"):
        PMICMonitor().read_watts()


# --- the sampling thread --------------------------------------------------------------------------------------


class Counter(SampledMonitor):
    name = "counter"

    def __init__(self, period_s, fail_at=None):
        super().__init__(period_s)
        self.n, self.fail_at = 0, fail_at

    def read_watts(self):
        self.n += 1
        if self.n == self.fail_at:
            raise OSError("I2C bus error")
        return float(self.n)


def test_sampling_thread_covers_the_run_and_stops_promptly():
    mon = Counter(period_s=0.005)
    before = time.perf_counter()
    mon.start()
    started = time.perf_counter()
    time.sleep(0.05)
    stopping = time.perf_counter()
    trace = mon.stop()
    assert before <= trace.t[0] <= started and trace.t[-1] >= stopping
    # the first and last samples, plus one per period at most: late slots are skipped, not made up in a burst
    assert 3 <= len(trace) <= (trace.t[-1] - trace.t[0]) / 0.005 + 2
    assert np.array_equal(trace.watts, np.arange(1, len(trace) + 1))
    slow = Counter(period_s=30.0)
    slow.start()
    t0 = time.perf_counter()
    assert len(slow.stop()) == 2 and time.perf_counter() - t0 < 1.0  # the first sample and the last
    with Counter(period_s=0.01) as mon:
        pass
    assert len(mon.trace) >= 2


def test_sampling_thread_errors_reach_the_caller():
    mon = Counter(period_s=0.001, fail_at=3)
    mon.start()
    time.sleep(0.02)
    with pytest.raises(RuntimeError, match="counter: sampling failed: I2C bus error"):
        mon.stop()
    with pytest.raises(RuntimeError, match="not started"):
        mon.stop()
    mon.start()
    with pytest.raises(RuntimeError, match="already started"):
        mon.start()
    mon.stop()
    with pytest.raises(ValueError, match="period_s"):
        Counter(period_s=0)


def test_power_trace_validates_and_crops():
    with pytest.raises(ValueError, match="increase strictly; sample 2"):
        PowerTrace([0.0, 1.0, 1.0], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="one length"):
        PowerTrace([0.0, 1.0], [1.0])
    trace = PowerTrace(np.arange(10.0), np.ones(10))
    assert np.array_equal(trace.between(2.5, 4.5).t, [2.0, 3.0, 4.0, 5.0])
    assert np.array_equal(trace.between(3.0, 4.0).t, [3.0, 4.0])  # samples on the edges need no neighbour
    with pytest.raises(ValueError, match="clock offset"):
        trace.between(20.0, 21.0)


if __name__ == "__main__":
    write_logs()
