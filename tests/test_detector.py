"""The firmware's always-on decisions (firmware_models/detector) against the Python listener's: the same detections,
scores bit for bit, from the same posteriors of a recording."""
import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from edgeosc import cbuild
from edgeosc.stream import Listener
from test_stream import burst_signal, wobbly

SOURCE = cbuild.DETECTOR / "edgeosc_detector.c"


class Detection(ctypes.Structure):
    _fields_ = [("keyword", ctypes.c_int32), ("score", ctypes.c_double), ("time", ctypes.c_int64),
                ("emitted", ctypes.c_int64)]


@pytest.fixture(scope="module")
def lib():
    lib = ctypes.CDLL(str(cbuild.build_shared([SOURCE], "edgeosc_detector", include_dirs=[cbuild.DETECTOR])))
    lib.edgeosc_detector_init.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_uint32, ctypes.c_int32,
                                          ctypes.c_double, ctypes.c_int64]
    lib.edgeosc_detector_push.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_double), ctypes.POINTER(Detection)]
    lib.edgeosc_detector_flush.argtypes = [ctypes.c_void_p, ctypes.POINTER(Detection)]
    lib.edgeosc_detector_posteriors.argtypes = [ctypes.POINTER(ctypes.c_int8), ctypes.c_int32,
                                                ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double)]
    return lib


def detect(lib, posteriors: np.ndarray, keywords, smooth: int, threshold: float, refractory: int) -> list[tuple]:
    """The C detector over a stream of posteriors [hops, classes], flushed: (keyword, score, time, emitted) each."""
    state = ctypes.create_string_buffer(1 << 16)  # opaque: larger than any EdgeoscDetector
    mask = sum(1 << k for k in keywords)
    assert lib.edgeosc_detector_init(state, posteriors.shape[1], mask, smooth, threshold, refractory) == 0
    out, found = Detection(), []
    for post in np.ascontiguousarray(posteriors, np.float64):
        if lib.edgeosc_detector_push(state, post.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), ctypes.byref(out)):
            found.append((out.keyword, out.score, out.time, out.emitted))
    while (r := lib.edgeosc_detector_flush(state, ctypes.byref(out))) >= 0:
        if r:
            found.append((out.keyword, out.score, out.time, out.emitted))
    return found


@pytest.mark.parametrize("smooth,threshold,refractory_s", [(1, 0.5, 1.0), (3, 0.45, 0.25), (5, 0.3, 0.0),
                                                             (12, 0.35, 0.5)])
def test_the_firmware_decides_as_the_listener_from_the_same_posteriors(lib, smooth, threshold, refractory_s):
    model, x = wobbly(), burst_signal()
    lis = Listener(model, hop_ms=100, threshold=threshold, smooth=smooth, refractory_s=refractory_s, record=True)
    lis.push(x)
    lis.flush()
    assert lis.detections, "a recording the settings detect something in"
    first = lis.trace[0][0] // lis.hop  # the listener's hop count at its first posterior; the firmware's is 1
    found = detect(lib, np.array([p for _, p in lis.trace]), lis.keywords, smooth, threshold, lis.refractory)
    sr, hop = lis.cfg.sample_rate, lis.hop
    assert [(model.classes[k], score) for k, score, _, _ in found] == [(d.keyword, d.score) for d in lis.detections]
    for (_, _, time, emitted), d in zip(found, lis.detections):  # the same instants, the firmware's clock shifted
        assert (time + 2 * (first - 1)) * hop / 2 / sr == pytest.approx(d.time_s, abs=1e-9)
        assert (emitted + first - 1) * hop / sr == pytest.approx(d.emitted_s, abs=1e-9)


def test_equal_keywords_go_to_the_first_as_in_python(lib):
    from edgeosc.stream import fires
    post = np.array([[0.0, 0.1, 0.45, 0.45]])
    assert detect(lib, post, [2, 3], 1, 0.4, 0)[0][0] == fires(post[0], 0, None, 0.4, 0, [2, 3]) == 2


def test_posteriors_of_int8_logits_and_bad_settings(lib):
    rng = np.random.default_rng(0)
    scale = 0.173
    table = np.exp(-scale * np.arange(256))
    for _ in range(20):
        q = rng.integers(-128, 128, 12).astype(np.int8)
        got = np.zeros(12)
        lib.edgeosc_detector_posteriors(q.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)), 12,
                                        table.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                                        got.ctypes.data_as(ctypes.POINTER(ctypes.c_double)))
        want = np.exp(scale * (q.astype(np.float64) - q.max()))
        np.testing.assert_allclose(got, want / want.sum(), rtol=1e-12)
    state = ctypes.create_string_buffer(1 << 16)
    for n, mask, smooth, threshold, refractory in [(0, 1, 3, 0.5, 0), (12, 0, 3, 0.5, 0), (12, 1 << 12, 3, 0.5, 0),
                                                   (12, 4, 0, 0.5, 0), (12, 4, 49, 0.5, 0), (12, 4, 3, 0.0, 0),
                                                   (12, 4, 3, 1.5, 0), (12, 4, 3, 0.5, -1), (17, 4, 3, 0.5, 0)]:
        assert lib.edgeosc_detector_init(state, n, mask, smooth, threshold, refractory) == -1


@pytest.mark.skipif(not shutil.which("arm-none-eabi-gcc"), reason="arm-none-eabi-gcc is not installed")
def test_it_compiles_for_cortex_m4_without_warnings(tmp_path):
    subprocess.run(["arm-none-eabi-gcc", "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16", "-Os",
                    "-ffreestanding", "-std=c99", "-Wall", "-Wextra", "-Werror", "-c", str(SOURCE),
                    "-o", str(tmp_path / "detector.o")], check=True)
