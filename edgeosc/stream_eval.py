"""Always-on evaluation: one long recording made from a split's clips, streamed through the Listener hop by hop,
its detections scored against where each keyword was said.

The recording: the split's clips in a random order (keywords, _unknown_ words and _silence_ alike), each after a
gap of quiet noise, or, in context, after 1-4 s of keyword-free audio (other sentences, noise, music: the
negatives' kind of audio, other draws), as a keyword comes in a room where people talk. A keyword event ends where its clip's speech ends: the clip's last frame whose loudest log-mel
is within frontend.ACTIVE_DB of the clip's loudest. A detection is a hit when it names the event's keyword and is
decided between the clip's start and `tolerance_s` after the speech end (the window is 1 s: a word is visible for
about that long), each event matched once; every other detection is a false alarm. Latency is the time from the
speech end to the hop that decided the detection (Detection.emitted_s), the smoothing delay included.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .config import DataConfig, is_keyword
from .data.audio import write_wav
from .data.clipset import ClipSet
from .io import atomic_path, by_number, write_json
from .report import plot_det_curves
from .stream import Detection, FrontEnd, Listener, Model, StreamError

GAP_S = (0.2, 0.8)  # the quiet between two clips, uniform
GAP_RMS = 1e-3  # its white noise (-60 dBFS): digital silence would floor the log-mels
CONTEXT_GAP_S = (1.0, 4.0)  # in context: the keyword-free audio between two clips, uniform
SWEEP = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)  # `stream-eval --sweep`'s thresholds


@dataclass(frozen=True)
class Event:
    keyword: str
    start_s: float  # the clip's start in the recording
    end_s: float  # its speech's end


def speech_end_s(clip: np.ndarray, front: FrontEnd) -> float:
    """Seconds from a clip's start to the end of its last active frame."""
    cfg = front.cfg
    level = front.frames(clip).max(1)
    last = int(np.flatnonzero(level >= level.max() - front.active)[-1])
    return (last * cfg.hop_length + cfg.frame_length) / cfg.sample_rate


def context_seconds(data: ClipSet, split: str, max_clips: int | None = None) -> float:
    """Keyword-free audio that long_recording's gaps in context can take at most."""
    n = len(data.indices(split)) if max_clips is None else min(max_clips, len(data.indices(split)))
    return n * CONTEXT_GAP_S[1]


def long_recording(data: ClipSet, split: str, front: FrontEnd, max_clips: int | None = None,
                   seed: int = 0, context: np.ndarray | None = None) -> tuple[np.ndarray, list[Event]]:
    """The split's clips (a random max_clips of them, if given) in a random order with gaps: float32 samples in
    [-1, 1] at the clips' rate, and the keyword clips' events. context: keyword-free audio (float32, the clips'
    rate, at least context_seconds long) whose consecutive stretches fill the gaps."""
    rng = np.random.default_rng(seed)
    idx = data.indices(split)
    if not len(idx):
        raise StreamError(f"the data set has no {split!r} clips")
    idx = rng.permutation(idx)[:max_clips]
    sr, parts, events, t, used = front.cfg.sample_rate, [], [], 0, 0
    if context is not None and len(context) < context_seconds(data, split, max_clips) * sr:
        raise StreamError(f"context audio of {len(context) / sr:.0f} s: {len(idx)} clips in context need "
                          f"{len(idx) * CONTEXT_GAP_S[1]:.0f} s")
    for i in idx:
        if context is None:
            gap = (GAP_RMS * rng.standard_normal(int(rng.uniform(*GAP_S) * sr))).astype(np.float32)
        else:
            gap = context[used: used + int(rng.uniform(*CONTEXT_GAP_S) * sr)]
            used += len(gap)
        clip = data.audio[i].astype(np.float32) / 32768
        t += len(gap)
        keyword = data.classes[data.labels[i]]
        if is_keyword(keyword):
            events.append(Event(keyword, t / sr, t / sr + speech_end_s(clip, front)))
        parts += [gap, clip]
        t += len(clip)
    return np.concatenate(parts), events


def score(detections: list[Detection], events: list[Event], duration_s: float, tolerance_s: float = 1.0) -> dict:
    """Hits, misses, recall, false alarms (and per hour of audio) and latency after the speech end (ms: median,
    p90, max) of detections against events."""
    used, latencies = set(), []
    for e in events:
        for i, d in enumerate(detections):
            if i not in used and d.keyword == e.keyword and e.start_s <= d.emitted_s <= e.end_s + tolerance_s:
                used.add(i)
                latencies.append(1e3 * (d.emitted_s - e.end_s))
                break
    false_alarms = len(detections) - len(used)
    lat = np.asarray(latencies)
    return dict(events=len(events), hits=len(used), misses=len(events) - len(used),
                recall=len(used) / len(events) if events else None, false_alarms=false_alarms,
                hours=duration_s / 3600, false_alarms_per_hour=false_alarms / (duration_s / 3600),
                latency_ms=None if not len(lat) else dict(median=float(np.median(lat)),
                                                           p90=float(np.percentile(lat, 90)), max=float(lat.max())))


def _listen(lis: Listener, audio: np.ndarray, progress=None) -> Listener:
    """Stream `audio` through the listener, a second of audio a push; progress(done, total) after each."""
    step = lis.hop * max(1, lis.cfg.sample_rate // lis.hop)
    for start in range(0, len(audio), step):
        lis.push(audio[start:start + step])
        if progress:
            progress(min(start + step, len(audio)), len(audio))
    lis.flush()
    return lis


def evaluate_stream(model: Model, data: ClipSet, split: str = "test", hop_ms: float = 20.0, threshold: float = 0.7,
                    smooth: int | None = None, refractory_s: float | None = None, max_clips: int | None = None,
                    seed: int = 0, tolerance_s: float = 1.0, wav_out: str | Path | None = None, progress=None,
                    thresholds=(), negatives: np.ndarray | None = None, context: np.ndarray | None = None,
                    smooths=(), trace_out: str | Path | None = None) -> dict:
    """Stream the long recording of `split` through `model` (a Listener with these settings) and score it; the
    recording and its events are written to wav_out (and wav_out with .json) when given. progress(done, total)
    is called every second of audio. thresholds: also score each of these from the same pass ("curve": the
    operating curve, recall against false alarms per hour). negatives: keyword-free audio (data/negatives.py)
    streamed by a listener of its own, every detection on it a false alarm: its false alarms per hour at each
    threshold beside the split's recall give the DET curve ("det") and the recall at 1, 5 and 10 false alarms
    per hour ("recall_at"), the field's figures. context: keyword-free audio between the clips (long_recording).
    smooths: the same curves for each of these smoothing lengths too, from the same pass ("by_smooth"). trace_out:
    also write every hop's posteriors (and the negatives' with negatives), the events and the listener's settings to
    this .npz (save_trace), to study decision rules without running the model again."""
    if tuple(data.classes) != tuple(model.classes):
        raise StreamError(f"{model.name}: its classes {list(model.classes)} are not the data set's "
                          f"{list(data.classes)}")
    if (negatives is not None or smooths) and not thresholds:
        thresholds = DET_THRESHOLDS
    if any(s < 1 for s in smooths):
        raise StreamError(f"smoothing lengths must be >= 1, got {list(smooths)}")
    lis = Listener(model, hop_ms, threshold, smooth, refractory_s, record=bool(thresholds) or trace_out is not None)
    smooth = lis.smooth  # the default's hops when not given (stream.smooth_hops)
    audio, events = long_recording(data, split, lis.front, max_clips, seed, context)
    sr = lis.cfg.sample_rate
    if wav_out is not None:
        write_wav(wav_out, audio, sr)
        write_json(Path(wav_out).with_suffix(".json"), dict(sample_rate=sr, events=[asdict(e) for e in events]))
    _listen(lis, audio, progress)
    duration = len(audio) / sr

    def curve(smooth):
        return [dict(threshold=th, **score(lis.replay(th, smooth), events, duration, tolerance_s)) for th in thresholds]
    res = dict(model=model.name, split=split, in_context=context is not None, hop_ms=hop_ms, threshold=threshold,
               smooth=smooth,
               refractory_s=lis.refractory_s, window=model.window, seed=seed, tolerance_s=tolerance_s,
               **score(lis.detections, events, duration, tolerance_s), per_hop=lis.stats(),
               **({"curve": curve(smooth)} if thresholds else {}))
    neg = None if negatives is None else _listen(Listener(model, hop_ms, threshold, smooth, refractory_s, record=True),
                                                  negatives, progress)
    if neg is not None:
        hours = len(negatives) / sr / 3600
        res.update(negative_scores(neg, hours, res["curve"]))
    if smooths:
        res["by_smooth"] = {str(s): dict(curve=c, **({} if neg is None else negative_scores(neg, hours, c, s)))
                            for s in smooths for c in [curve(s)]}
    if trace_out is not None:
        save_trace(trace_out, lis, events, neg)
    return res


def protocol_data(trained: DataConfig, cache_dir=None) -> ClipSet:
    """The data set a checkpoint trained with `trained` is evaluated on: its splits without the keyword-free training
    audio (a split, not training), with the _unknown_ class that audio gave the model where the task has none."""
    from .data import load_dataset
    from .data.negatives import with_unknown_class
    data = load_dataset(dataclasses.replace(trained, negatives_hours=0.0), cache_dir)
    return with_unknown_class(data) if trained.negatives_hours else data


def run_protocol(model: Model, data: ClipSet, split: str = "test", negatives_hours: float | None = None,
                 in_context: bool = False, max_clips: int | None = None, seed: int = 0, cache_dir=None,
                 show: bool = True, **settings) -> dict:
    """evaluate_stream with the always-on protocol's audio, made once and cached: `negatives_hours` of keyword-free
    audio whose false alarms give recall at 1, 5 and 10 per hour, and with in_context 1-4 s of other draws of it
    between the split's clips. show: progress bars while the audio is made and streamed."""
    from tqdm.auto import tqdm
    from .data import default_cache_dir
    from .data.negatives import load_negatives_shown
    cache = cache_dir or default_cache_dir()
    negatives = (load_negatives_shown(negatives_hours, seed, cache, "keyword-free audio", show)
                 if negatives_hours else None)
    context = None
    if in_context:  # whole 0.05 h, so nearby clip counts share one cached recording; other draws than the negatives'
        hours = math.ceil(context_seconds(data, split, max_clips) / 180) / 20
        context = load_negatives_shown(hours, 1000 + seed, cache, "context audio", show)
    with tqdm(total=0, unit="s", desc="streaming", leave=False, disable=not show) as bar:
        def progress(done, total):
            bar.total = round(total / model.feature_cfg.sample_rate)
            bar.n = round(done / model.feature_cfg.sample_rate)
            bar.refresh()
        return evaluate_stream(model, data, split, max_clips=max_clips, seed=seed, progress=progress,
                               negatives=negatives, context=context, **settings)


def save_trace(path: str | Path, lis: Listener, events: list[Event], negatives: Listener | None = None) -> Path:
    """A recorded pass as an .npz (atomic): each hop's sample count and posteriors (and the keyword-free audio's),
    the keyword events and what the listener was (classes, keywords, hop, sample rate, refractory period)."""
    def arrays(trace):
        return (np.array([h for h, _ in trace], np.int64), np.array([p for _, p in trace], np.float64).reshape(
            len(trace), len(lis.model.classes)))
    samples, posts = arrays(lis.trace or [])
    extra = {}
    if negatives is not None:
        extra["negative_samples"], extra["negative_posteriors"] = arrays(negatives.trace or [])
    meta = dict(model=lis.model.name, classes=list(lis.model.classes), keywords=lis.keywords, hop=lis.hop,
                sample_rate=lis.cfg.sample_rate, refractory_s=lis.refractory_s, events=[asdict(e) for e in events])
    with atomic_path(Path(path)) as tmp:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, samples=samples, posteriors=posts, meta=np.array(json.dumps(meta)), **extra)
    return Path(path)


DET_THRESHOLDS = tuple(float(t) for t in np.round(np.r_[np.arange(0.30, 0.951, 0.05), 0.97, 0.98, 0.99, 0.995,
                                                        0.998, 0.999], 3))
TARGETS_PER_HOUR = (1, 5, 10)  # the false-alarm rates recall is reported at


def negative_scores(lis: Listener, hours: float, curve: list[dict], smooth: int | None = None) -> dict:
    """False alarms on the `hours` of keyword-free audio `lis` heard (record=True), at its threshold and at each
    threshold of `curve` (the positives' operating curve at the same smoothing, `smooth` or the listener's): the DET
    curve and the best recall at <= 1, 5, 10 per hour."""
    det = []
    for c in curve:
        fa = len(lis.replay(c["threshold"], smooth))
        det.append(dict(threshold=c["threshold"], recall=c["recall"], false_alarms=fa, false_alarms_per_hour=fa / hours,
                        latency_ms=c["latency_ms"]))
    recall_at = {}
    for target in TARGETS_PER_HOUR:
        ok = [d for d in det if d["false_alarms_per_hour"] <= target and d["recall"] is not None]
        best = max(ok, key=lambda d: (d["recall"], -d["threshold"])) if ok else None
        recall_at[str(target)] = best and dict(recall=best["recall"], threshold=best["threshold"],
                                               false_alarms_per_hour=best["false_alarms_per_hour"])
    at_threshold = len(lis.replay(smooth=smooth))
    return dict(negatives=dict(hours=hours, false_alarms=at_threshold, false_alarms_per_hour=at_threshold / hours),
                det=det, recall_at=recall_at)


def plot_det(res: dict, path: str | Path) -> Path:
    """The DET curve: keywords missed against false alarms per hour of keyword-free audio (log axis; 0 drawn at the
    axis' left end), one line per smoothing length."""
    curves = {str(res["smooth"]): res["det"], **{s: r["det"] for s, r in res.get("by_smooth", {}).items()}}
    labels = {s: f"smoothed over {s} hop{'s' if s != '1' else ''}" for s in curves}
    return plot_det_curves({labels[s]: curves[s] for s in sorted(curves, key=int)}, res["negatives"]["hours"],
                           f"{res['model']}: DET curve", path, TARGETS_PER_HOUR)


def format_result(r: dict) -> str:
    lat = r["latency_ms"]
    how = f"streaming, window {r['window']}" if r["window"] else "the whole window each hop"
    where = " in context" if r.get("in_context") else ""
    lines = [f"{r['model']} ({how}), {r['split']} split{where} as one recording of {60 * r['hours']:.1f} min, "
             f"hop {r['hop_ms']:g} ms, threshold {r['threshold']}, smooth {r['smooth']}:",
             f"  keywords {r['events']}: hits {r['hits']}, misses {r['misses']}, recall "
             f"{100 * r['recall']:.2f}%" if r["recall"] is not None else "  no keyword clips",
             f"  false alarms {r['false_alarms']}: {r['false_alarms_per_hour']:.1f} per hour"]
    if lat:
        lines.append(f"  latency after the keyword's end: median {lat['median']:.0f} ms, p90 {lat['p90']:.0f} ms, "
                     f"max {lat['max']:.0f} ms")
    if r.get("recall_at"):
        neg = r["negatives"]
        lines.append(f"  keyword-free audio: {neg['hours']:.2f} h, {neg['false_alarms']} false alarms at threshold "
                     f"{r['threshold']} ({neg['false_alarms_per_hour']:.1f} per hour)")
        lines.append("  recall at " + ", ".join(
            f"{t} false alarm{'s' if t != '1' else ''} per hour: " +
            (f"{100 * v['recall']:.1f}% (threshold {v['threshold']})" if v else "not reached")
            for t, v in by_number(r["recall_at"])))
    for smooth, v in by_number(r.get("by_smooth", {})):
        if v.get("recall_at"):
            lines.append(f"  smoothed over {smooth:>3} hops, recall at 1 / 5 / 10 false alarms per hour: " + " / ".join(
                f"{100 * a['recall']:.1f}%" if a else "-" for _, a in by_number(v["recall_at"])))
    if r.get("det"):
        lines.append("  threshold   recall   false alarms per hour (keyword-free audio)")
        for d in r["det"]:
            rec = "-" if d["recall"] is None else f"{100 * d['recall']:.1f}%"
            lines.append(f"  {d['threshold']:9.3f}   {rec:>6}   {d['false_alarms_per_hour']:8.1f}")
    elif r.get("curve") and r["recall"] is not None:
        lines.append("  threshold   recall   false alarms per hour   median latency (ms)")
        for c in r["curve"]:
            med = f"{c['latency_ms']['median']:.0f}" if c["latency_ms"] else "-"
            lines.append(f"  {c['threshold']:9.2f}   {100 * c['recall']:5.1f}%   {c['false_alarms_per_hour']:21.1f}   "
                         f"{med:>19}")
    return "\n".join(lines)
