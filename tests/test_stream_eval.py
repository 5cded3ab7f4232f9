"""Always-on evaluation: the long recording, the scoring of detections against keyword events, the whole loop on a
model whose answers are known (test_stream's tone double), and bad input."""
import dataclasses
import json

import numpy as np
import pytest
from click.testing import CliRunner

from edgeosc.cli import main
from edgeosc.data.clipset import ClipSet
from edgeosc.stream import Detection, FrontEnd, StreamError
from edgeosc.stream_eval import Event, evaluate_stream, format_result, long_recording, score, speech_end_s

from test_stream import BAND_CFG, SR, TONE_HZ, band_model, noise

ONSET_S, BURST_S = 0.35, 0.3


def tone_set(n_per_class: int = 3) -> ClipSet:
    """1 s clips of background noise, a 0.3 s tone burst at 0.35 s in each but the _silence_ ones."""
    classes = band_model().classes  # _silence_, _unknown_, low, high
    t = np.arange(int(BURST_S * SR)) / SR
    burst = 0.3 * np.sin(2 * np.pi * t[None] * np.array(list(TONE_HZ.values()))[:, None])
    burst *= np.minimum(1, np.minimum(t, t[::-1]) / 5e-3)  # 5 ms ramps
    audio, labels = [], []
    for c, name in enumerate(classes):
        for i in range(n_per_class):
            x = noise(1.0, seed=10 * c + i)
            if name in TONE_HZ:
                s = int(ONSET_S * SR)
                x[s:s + len(t)] += burst[list(TONE_HZ).index(name)]
            audio.append(np.round(np.clip(x, -1, 1) * 32767).astype(np.int16))
            labels.append(c)
    n = len(audio)
    return ClipSet(np.stack(audio), np.array(labels), np.array(["g"] * n), np.array(["test"] * n), classes)


def test_score_counts_hits_false_alarms_and_latency():
    events = [Event("yes", 1.0, 1.6), Event("no", 3.0, 3.5), Event("yes", 5.0, 5.4)]
    dets = [Detection("yes", 1.5, 0.9, emitted_s=1.7),   # hit, 100 ms after the speech
            Detection("yes", 1.8, 0.9, emitted_s=2.0),   # the same word again: a false alarm
            Detection("go", 3.3, 0.9, emitted_s=3.6),    # the wrong keyword: a false alarm, "no" missed
            Detection("yes", 7.0, 0.9, emitted_s=7.0)]   # after the tolerance: a false alarm, "yes" missed
    r = score(dets, events, duration_s=36.0, tolerance_s=1.0)
    assert (r["events"], r["hits"], r["misses"], r["false_alarms"]) == (3, 1, 2, 3)
    assert r["recall"] == pytest.approx(1 / 3) and r["false_alarms_per_hour"] == pytest.approx(300.0)
    assert r["latency_ms"]["median"] == pytest.approx(100.0)
    assert score([], [], 10.0)["recall"] is None and score([], [], 10.0)["latency_ms"] is None


def test_long_recording_holds_every_clip_and_finds_each_keywords_end():
    data = tone_set()
    front = FrontEnd(BAND_CFG)
    audio, events = long_recording(data, "test", front, seed=1)
    assert audio.dtype == np.float32 and len(audio) > len(data.audio) * SR
    assert sorted(e.keyword for e in events) == sorted(["low"] * 3 + ["high"] * 3)  # not _silence_, _unknown_
    for e in events:  # the clip is in the recording at its start, and its speech ends where the burst does
        start = round(e.start_s * SR)
        assert np.abs(audio[start:start + SR] * 32768 - data.audio).sum(1).min() < SR  # some clip, up to rounding
        assert ONSET_S + BURST_S - 0.02 <= e.end_s - e.start_s <= ONSET_S + BURST_S + 0.04
    assert speech_end_s(data.audio[-1].astype(np.float32) / 32768, front) == pytest.approx(
        ONSET_S + BURST_S, abs=0.04)
    again, _ = long_recording(data, "test", front, seed=1)
    assert np.array_equal(audio, again) and len(long_recording(data, "test", front, max_clips=4)[0]) < len(audio)


def test_in_context_the_gaps_are_stretches_of_the_given_audio():
    from edgeosc.stream_eval import CONTEXT_GAP_S, context_seconds
    data, front = tone_set(), FrontEnd(BAND_CFG)
    context = np.arange(int(context_seconds(data, "test") * SR), dtype=np.float32) / 1e7  # a ramp: readable origin
    audio, events = long_recording(data, "test", front, seed=1, context=context)
    ends = []
    for e in events:  # each keyword clip sits right after a stretch of the ramp
        start = round(e.start_s * SR)
        assert np.abs(audio[start:start + SR] * 32768 - data.audio).sum(1).min() < SR
        assert np.allclose(np.diff(audio[start - 10:start]), 1e-7, rtol=0.1)
        ends.append(audio[start - 1])
    assert np.all(np.diff(ends) > 0)  # consecutive stretches, in order
    n = len(data.indices("test"))
    assert CONTEXT_GAP_S[0] * n <= len(audio) / SR - n <= CONTEXT_GAP_S[1] * n
    with pytest.raises(StreamError, match="context audio of"):
        long_recording(data, "test", front, context=context[:SR])


def test_a_model_that_knows_every_word_hits_them_all_without_false_alarms(tmp_path):
    r = evaluate_stream(band_model(), tone_set(), hop_ms=100, threshold=0.5, smooth=1, seed=2,
                        wav_out=tmp_path / "rec.wav")
    assert (r["events"], r["hits"], r["false_alarms"]) == (6, 6, 0), r
    # the double fires once the window holds the whole burst and has moved past it: within a hop and a frame
    assert -40 <= r["latency_ms"]["median"] and r["latency_ms"]["max"] <= 140, r["latency_ms"]
    saved = json.loads((tmp_path / "rec.json").read_text())
    assert len(saved["events"]) == 6 and (tmp_path / "rec.wav").stat().st_size > 2 * 12 * SR


def test_one_pass_scores_every_threshold_as_its_own_run():
    """The operating curve replays the recorded posteriors: each threshold's point equals a run at that threshold.
    A double that is sure of "low" (posterior 1) and unsure of "high" (0.6): both found at 0.5, "low" alone at 0.7."""
    double = band_model()
    high = double.classes.index("high")

    def unsure(feats):
        post = np.exp(double.run(feats))
        post[0] += 0.4 * post[high]  # 40% of "high" moves to _silence_
        post[high] *= 0.6
        return np.log(post)
    model = dataclasses.replace(double, run=unsure)
    kw = dict(hop_ms=100, smooth=1, seed=2)
    swept = evaluate_stream(model, tone_set(), threshold=0.5, thresholds=(0.5, 0.7), **kw)
    for point in swept["curve"]:
        alone = evaluate_stream(model, tone_set(), threshold=point["threshold"], **kw)
        assert {k: point[k] for k in ("hits", "false_alarms", "latency_ms")} == \
            {k: alone[k] for k in ("hits", "false_alarms", "latency_ms")}
    assert [(p["hits"], p["false_alarms"]) for p in swept["curve"]] == [(6, 0), (3, 0)]
    assert "curve" not in evaluate_stream(model, tone_set(), **kw)
    by = evaluate_stream(model, tone_set(), threshold=0.5, thresholds=(0.5, 0.7), smooths=(1, 3), **kw)["by_smooth"]
    assert by["1"]["curve"] == swept["curve"] and by["3"]["curve"] != by["1"]["curve"]
    assert "threshold   recall" in format_result(swept)


def test_bad_inputs_are_clear_errors(tmp_path):
    data = tone_set(1)
    other = ClipSet(data.audio, data.labels, data.groups, data.split, ("_silence_", "_unknown_", "a", "b"))
    with pytest.raises(StreamError, match="classes"):
        evaluate_stream(band_model(), other)
    with pytest.raises(StreamError, match="no 'val' clips"):
        evaluate_stream(band_model(), data, split="val")
    (tmp_path / "m.tflite").write_bytes(b"not a model")
    res = CliRunner().invoke(main, ["stream-eval", str(tmp_path / "m.tflite")])
    assert res.exit_code != 0 and "manifest.json" in res.output
