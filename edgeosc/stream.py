"""Streaming keyword spotting: a sliding window over a stream, smoothed posteriors, timed detections.

Each hop (default 100 ms) the window (the model's clip, 1 s) slides by one hop. The front end is
incremental: frames sit on a fixed sample grid, so only the hop's new frames (5 of 49 at 100 ms) get an
FFT, mel filters and log; the per-window mean (features.py's "utterance" normalisation) is then taken
over the window's frames, which makes the features equal to the batch features of the same audio.

A streaming model (trained with `--window`, docs/maths.md#streaming) runs instead one frame at a time
(`Model.step`): each hop's new frames, normalised with the window they end, go through its causal layers, whose
state carries the past; its attention reads the last `window` frames. Otherwise, below:

The network is recomputed on the whole window every hop, for an oscillator model as for softmax. The
linear form's readout out_i = phi(z_i)^T S / phi(z_i)^T s sums over keys, S = sum_j psi(r_j) v_j^T, and a
sliding sum could add the entering tokens and drop the leaving ones, but only if the tokens that stay
kept their r_j and v_j. Here none do: (1) the window mean moves every frame's features; (2) the
positional embeddings are absolute, so a frame that slides from position t to t - n gets pos[t - n]
instead of pos[t], and after LayerNorm every r_j and v_j differs; (3) the state z_i = unit(unit(w_i) R)
couples each query to every key through row normalisations, non-causally, so all of block 1's outputs,
hence all of block 2's keys and values, change whenever the window moves. A reusable S needs another
network: causal attention, relative (or no) positions and a causal normaliser. So the saving
measured here is the front end's (`compare_full` times the 49-frame recompute beside the incremental one).
"""
from __future__ import annotations

import json
import math
import queue
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .config import FeatureConfig, from_dict, is_keyword
from .data.audio import read_wav, resample

MANIFEST = "manifest.json"  # written beside exported models (export/__init__.py)


class StreamError(ValueError):
    """A streaming problem the user can fix (bad hop, model file without manifest, no microphone package)."""


@dataclass(frozen=True)
class Model:
    """What the listener runs: class names, the features the model was trained on, features -> logits; a
    streaming model also one frame at a time (step; reset starts a new stream)."""
    name: str
    classes: tuple[str, ...]
    feature_cfg: FeatureConfig
    run: Callable[[np.ndarray], np.ndarray]  # float32 [1, frames, coeffs] -> logits [classes]
    step: Callable[[np.ndarray], np.ndarray] | None = None  # float32 [coeffs], the next frame -> logits [classes]
    reset: Callable[[], None] | None = None
    window: int = 0  # frames a streaming model attends over
    # a streaming model's drift check: given the stream's last frames (enough for every layer's window), a fresh
    # stream over them against the carried one -> dict(equal, detail); stream_soak.py runs it after hours
    verify: Callable[[list], dict] | None = None


def streaming_model(name: str, net, classes, feature_cfg: FeatureConfig) -> Model:
    """A streaming KWSTransformer (ModelConfig.window > 0) as a Model: step runs its stream_step."""
    import torch
    state: dict = {"s": None}

    def run(x):
        with torch.no_grad():
            return net(torch.from_numpy(x))[0].numpy()

    def step(frame):
        with torch.no_grad():
            logits, state["s"] = net.stream_step(torch.from_numpy(np.ascontiguousarray(frame, np.float32))[None],
                                                 state["s"])
        state["last"] = logits[0].numpy()
        return state["last"]

    def verify(frames):  # float: the same logits from a fresh stream, up to float32 rounding
        s = None
        with torch.no_grad():
            for frame in frames:
                logits, s = net.stream_step(torch.from_numpy(np.ascontiguousarray(frame, np.float32))[None], s)
        diff = float(np.abs(logits[0].numpy() - state["last"]).max())
        return dict(equal=diff <= 1e-4 * max(1.0, float(np.abs(state["last"]).max())),
                    detail=f"logits within {diff:.2g} of a fresh stream's")
    return Model(name, tuple(classes), feature_cfg, run, step, lambda: state.update(s=None), net.window, verify)


def load_model(path, interpreter: str | None = None, window: int | None = None) -> Model:
    """A torch checkpoint (.pt), or an exported .tflite run by edgeosc.runtime with the manifest.json beside it.
    window: a streaming checkpoint's attention window (at most the trained one; default the trained one)."""
    path = Path(path)
    if path.suffix == ".pt":
        import torch
        from .checkpoint import load_checkpoint
        ckpt = load_checkpoint(path)
        net = ckpt.model.eval()
        trained = getattr(ckpt.model_cfg, "window", 0)
        if window is not None:
            if not trained:
                raise StreamError(f"{path}: --window needs a streaming model (trained with --window); this one "
                                  "attends over its whole 1 s clip")
            try:
                net.set_window(window)
            except ValueError as e:
                raise StreamError(f"{path}: {e}") from None
        if trained:
            return streaming_model(path.name, net, ckpt.classes, ckpt.feature_cfg)

        def run(x):
            with torch.no_grad():
                return net(torch.from_numpy(x))[0].numpy()
        return Model(path.name, ckpt.classes, ckpt.feature_cfg, run)
    if path.suffix != ".tflite":
        raise StreamError(f"{path}: expected a checkpoint (.pt) or an exported model (.tflite)")
    manifest = path.parent / MANIFEST
    if not manifest.is_file():
        raise StreamError(f"{path}: no {MANIFEST} beside it to give its classes and features "
                          "(export with `edgeosc export`)")
    try:
        man = json.loads(manifest.read_text())
        classes, cfg = tuple(man["classes"]), from_dict(FeatureConfig, man["feature_config"])
    except (ValueError, KeyError, TypeError) as e:
        raise StreamError(f"{manifest}: not an edgeosc export manifest ({type(e).__name__}: {e})") from None
    from . import runtime
    info = runtime.check_tflite(path)
    sg = info["subgraphs"][0]
    streaming = sg["inputs"][0]["name"] == runtime.FRAME or len(sg["outputs"][0]["shape"]) == 3
    # a stream or window export without XNNPACK, whose float requantization depends on the shapes: the two files
    # then give the same logits bit for bit in each interpreter
    runner = runtime.load(path, interpreter, xnnpack=not streaming)
    trained = man.get("model_config", {}).get("window", 0)
    if window is not None and window != trained:
        raise StreamError(f"{path}: --window {window}: an exported model attends over the window it was exported "
                          f"with ({trained or 'its whole clip'}); export again from a checkpoint for another")
    if runner.inputs[0].name == runtime.FRAME:  # stream_int8.tflite: one frame, the state as extra inputs and outputs
        return _tflite_stream(runner, classes, cfg, trained)
    if runner.input_shape[1:] != (cfg.n_frames, cfg.n_coeffs) or runner.output_shape[-1] != len(classes):
        raise StreamError(f"{path}: model shapes {runner.input_shape} -> {runner.output_shape} do not match "
                          f"its manifest ({cfg.n_frames} frames x {cfg.n_coeffs}, {len(classes)} classes)")
    return Model(runner.name, classes, cfg, lambda x: runner.run(x)[0])


def _tflite_stream(runner, classes, cfg: FeatureConfig, window: int) -> Model:
    """A stream export (export/tflite/stream.py) as a streaming Model: each step feeds one frame and the state the
    last step left; a new stream starts with every state tensor at its zero point (real 0)."""
    from .runtime import STATE_IN, STATE_OUT
    if runner.inputs[0].shape != (1, cfg.n_coeffs) or runner.output_shape != (1, len(classes)) or \
            [t.name[len(STATE_IN):] for t in runner.inputs[1:]] != [t.name[len(STATE_OUT):] for t in runner.outputs[1:]]:
        raise StreamError(f"{runner.path}: not a stream export of this manifest's model (one frame [1, "
                          f"{cfg.n_coeffs}] and its state in, logits [1, {len(classes)}] and the next state out)")
    fresh = [np.full(t.shape, t.zero_point[0] if t.zero_point else 0, t.dtype) for t in runner.inputs[1:]]
    state = {"s": fresh}

    def step(frame):
        outs = runner.run_raw(runner.inputs[0].quantize(np.asarray(frame, np.float32)[None]), *state["s"])
        state["s"] = outs[1:]
        return runner.outputs[0].dequantize(outs[0])[0]

    def run(x):  # a whole window: a fresh stream over its frames, the last frame's logits
        state["s"] = fresh
        for frame in x[0]:
            logits = step(frame)
        return logits

    names = [t.name[len(STATE_IN):] for t in runner.inputs[1:]]

    def verify(frames):  # integers: a fresh stream's state equals the carried one bit for bit
        s = []
        for name, zero, now in zip(names, fresh, state["s"]):
            if name.endswith("/clock"):  # the linear core's frame number, keys held and ring slot, len(frames) back
                t, _, slot = (int(x) for x in now)
                zero = np.array([((t - len(frames) + (1 << 31)) & 0xFFFFFFFF) - (1 << 31), 0,
                                 (slot - len(frames)) % window], np.int32)
            s.append(zero)
        for frame in frames:
            s = runner.run_raw(runner.inputs[0].quantize(np.asarray(frame, np.float32)[None]), *s)[1:]
        differ = [n for n, a, b in zip(names, s, state["s"]) if not np.array_equal(a, b)]
        return dict(equal=not differ, detail=f"state tensors that differ from a fresh stream's: {differ}" if differ
                    else f"all {len(names)} state tensors equal a fresh stream's bit for bit")
    return Model(runner.name, classes, cfg, run, step, lambda: state.update(s=fresh), window, verify)


class FrontEnd:
    """features.py's log-mel / MFCC frames in numpy (the same constants and steps as FeatureExtractor)."""

    def __init__(self, cfg: FeatureConfig):
        from .frontend import ACTIVE_DB, LOG_OFFSET, mfcc_constants, nats  # numpy only: a .tflite run needs no torch
        const = mfcc_constants(cfg)
        self.cfg, self.offset, self.floor, self.active = cfg, LOG_OFFSET, nats(cfg.floor_db), nats(ACTIVE_DB)
        self.window, self.mel_t = const["window"], const["mel"].T.copy()
        self.dct_t = const["dct"].T.copy() if cfg.n_mfcc else None

    def frames(self, samples: np.ndarray) -> np.ndarray:
        """The log-mels of every whole frame in `samples`, frames starting at sample 0 (normalize makes them the
        model's coefficients; a frame's level is their largest)."""
        n, hop = self.cfg.frame_length, self.cfg.hop_length
        frames = np.lib.stride_tricks.sliding_window_view(samples, n)[::hop] * self.window
        return np.log(np.abs(np.fft.rfft(frames, axis=-1)).astype(np.float32) @ self.mel_t + self.offset)

    def normalize(self, log_mels: np.ndarray) -> np.ndarray:
        """Frames' log-mels -> the model's input: the floor, the DCT (MFCC), the mean."""
        if self.floor:  # log-mel only
            log_mels = np.maximum(log_mels, log_mels.max() - np.float32(self.floor))
        feats = log_mels if self.dct_t is None else log_mels @ self.dct_t
        if self.cfg.normalize == "active":
            level = log_mels.max(1)
            return feats - feats[level >= level.max() - self.active].mean(0)
        if self.cfg.normalize == "running":
            return feats - np.cumsum(feats, 0) / np.arange(1, len(feats) + 1, dtype=feats.dtype)[:, None]
        return feats - feats.mean(0) if self.cfg.normalize == "utterance" else feats


LATENCY_HOPS = 30_000  # Listener.stats summarises this many latest hops (10 minutes at 20 ms)


@dataclass(frozen=True)
class Detection:
    keyword: str
    time_s: float  # window end, less the smoothing delay (k - 1) / 2 hops
    score: float  # smoothed posterior
    emitted_s: float = 0.0  # the stream's time when it was decided (the end of the hop that completed it)


def _summary(ms: list[float]) -> dict | None:
    if not ms:
        return None
    a = np.asarray(ms)
    return dict(median_ms=float(np.median(a)), p90_ms=float(np.percentile(a, 90)), max_ms=float(a.max()))


def fires(smoothed: np.ndarray, t: int, last: int | None, threshold: float, refractory: int, keywords) -> int | None:
    """The decision rule: the likeliest keyword, if its smoothed posterior reaches `threshold` at least `refractory`
    after the last detection (None: none yet); else None. Times are whole half hops (a decision's time, the window's
    end less the smoothing delay of (n - 1) / 2 hops, is one), so the rule is exact in any language: the C firmware's
    (firmware_models/detector) makes the same decisions from the same posteriors."""
    k = max(keywords, key=lambda i: smoothed[i])
    return k if smoothed[k] >= threshold and (last is None or t - last >= refractory) else None


# the default smoothing: posteriors averaged over 300 ms of hops, whatever the hop (3 at 100 ms, 15 at 20 ms). On
# keyword-free audio single-hop spikes are most false alarms: over 300 ms the recomputed whole-clip softmax keeps
# 52% of keywords at <= 5 false alarms an hour where 60 ms kept 2% (docs/notebook.md#the-always-on-protocol-in-full)
SMOOTH_MS = 300.0


def smooth_hops(hop_ms: float) -> int:
    """The default smoothing length at this hop: SMOOTH_MS of hops, at least one."""
    return max(1, round(SMOOTH_MS / hop_ms))


def half_hops(seconds: float, hop: int, sample_rate: int) -> int:
    """A duration in whole half hops, rounded up (at most a half hop more than asked)."""
    return math.ceil(round(2 * seconds * sample_rate / hop, 6))


class Listener:
    """Audio in (any chunk size), one decision per hop, detections out; latencies per hop.

    Decisions start once a whole window of the stream is in (after 1 s): a window padded with digital
    silence would make the onset of background noise look like a word. A detection needs a keyword class
    (not _silence_ / _unknown_) whose posterior, averaged over the last `smooth` hops (default: SMOOTH_MS of
    them), reaches `threshold`;
    after one, none for `refractory_s` (a word stays visible in the window for about a window length, so
    the default is the window's).
    """

    def __init__(self, model: Model, hop_ms: float = 100.0, threshold: float = 0.7, smooth: int | None = None,
                 refractory_s: float | None = None, compare_full: bool = False, record: bool = False):
        cfg = self.cfg = model.feature_cfg
        smooth = smooth_hops(hop_ms) if smooth is None else smooth
        hop = hop_ms * cfg.sample_rate / 1000
        self.hop = round(hop)
        new = self.hop // cfg.hop_length
        if abs(hop - self.hop) > 1e-6 or self.hop % cfg.hop_length or not 1 <= new <= cfg.n_frames:
            step = 1000 * cfg.hop_length / cfg.sample_rate
            raise StreamError(f"hop must be a multiple of the {step:g} ms frame hop, at most "
                              f"{cfg.n_frames * step:g} ms; got {hop_ms:g} ms")
        if not 0 < threshold <= 1 or smooth < 1:
            raise StreamError(f"need 0 < threshold <= 1 and smooth >= 1, got {threshold}, {smooth}")
        self.keywords = [i for i, c in enumerate(model.classes) if is_keyword(c)]
        if not self.keywords:
            raise StreamError(f"{model.name}: no keyword class among {model.classes}")
        self.model, self.front, self.new_frames = model, FrontEnd(cfg), new
        self.threshold, self.smooth, self.compare_full = threshold, smooth, compare_full
        self.refractory_s = cfg.clip_samples / cfg.sample_rate if refractory_s is None else refractory_s
        if self.refractory_s < 0:
            raise StreamError(f"need refractory_s >= 0, got {self.refractory_s}")
        # the new frames are the window's last ones; the frame grid stays put as the window slides
        last = (cfg.n_frames - 1) * cfg.hop_length
        self._new = slice(last - (new - 1) * cfg.hop_length, last + cfg.frame_length)
        self.audio = np.zeros(cfg.clip_samples, np.float32)
        self.raw = self.front.frames(self.audio)  # the window's frames' log-mels
        self._pending = np.zeros(0, np.float32)
        self._posts: deque = deque(maxlen=smooth)
        self._last: int | None = None  # the last detection's time in half hops
        self.samples, self.hops, self.detections = 0, 0, []
        self.trace: list | None = [] if record else None  # record: every hop's (samples so far, posterior)
        self._replays: dict = {}  # smooth -> the decisions replayed from the trace (replay)
        # the latest hops' latencies only: a listener runs for days, its memory must not grow with them
        self.features_ms, self.full_ms, self.model_ms = (deque(maxlen=LATENCY_HOPS) for _ in range(3))
        if model.reset:
            model.reset()

    @property
    def refractory(self) -> int:
        """refractory_s in half hops, as the decision rule counts time."""
        return half_hops(self.refractory_s, self.hop, self.cfg.sample_rate)

    def window_features(self) -> np.ndarray:
        """The current window's model input [frames, coeffs]."""
        return self.front.normalize(self.raw)

    def push(self, samples) -> list[Detection]:
        """Feed mono float samples in [-1, 1] at the model's rate; returns the detections they complete."""
        x = np.concatenate([self._pending, np.asarray(samples, np.float32).ravel()])
        n = len(x) // self.hop
        found = [d for i in range(n) if (d := self._step(x[i * self.hop:(i + 1) * self.hop]))]
        self._pending = x[n * self.hop:]
        return found

    def _step(self, chunk: np.ndarray) -> Detection | None:
        t0 = time.perf_counter()
        self.audio[:-self.hop] = self.audio[self.hop:]
        self.audio[-self.hop:] = chunk
        self.raw[:-self.new_frames] = self.raw[self.new_frames:]
        self.raw[-self.new_frames:] = self.front.frames(self.audio[self._new])
        self.samples += self.hop
        streaming = self.model.step is not None
        if self.samples < self.cfg.clip_samples and not streaming:
            return None
        feats = self.window_features()
        t1 = time.perf_counter()
        if self.compare_full:  # the cost avoided: every frame of the window, as a batch front end does
            self.front.normalize(self.front.frames(self.audio))
            self.full_ms.append(1e3 * (time.perf_counter() - t1))
        t2 = time.perf_counter()
        if streaming:  # the hop's new frames, one at a time, from the stream's start
            for frame in feats[-self.new_frames:].copy():  # a copy: feats may be a view of the sliding buffer
                logits = self.model.step(frame)
            if self.samples < self.cfg.clip_samples:
                return None
        else:
            logits = self.model.run(feats[None])
        logits = np.asarray(logits, np.float64)
        self.model_ms.append(1e3 * (time.perf_counter() - t2))
        self.features_ms.append(1e3 * (t1 - t0))
        post = np.exp(logits - logits.max())
        self._posts.append(post / post.sum())
        if self.trace is not None:
            self.trace.append((self.samples, self._posts[-1]))
            self._replays.clear()  # a replay covers the trace as it was
        self.hops += 1
        return self._decide()

    def _decide(self) -> Detection | None:
        smoothed = np.mean(self._posts, axis=0)
        delay = len(self._posts) - 1  # half hops: the smoothing's (n - 1) / 2 hops
        t = (self.samples - delay / 2 * self.hop) / self.cfg.sample_rate
        when = 2 * (self.samples // self.hop) - delay
        k = fires(smoothed, when, self._last, self.threshold, self.refractory, self.keywords)
        if k is None:
            return None
        self._last = when
        self.detections.append(Detection(self.model.classes[k], t, float(smoothed[k]),
                                         self.samples / self.cfg.sample_rate))
        return self.detections[-1]

    def flush(self) -> list[Detection]:
        """End of stream: the average shrinks onto the last hops, as a moving average does at a signal's end.

        A last partial hop is dropped: padding it with digital silence could itself look like a word."""
        found = []
        while len(self._posts) > 1:
            self._posts.popleft()
            if d := self._decide():
                found.append(d)
        return found

    def replay(self, threshold: float | None = None, smooth: int | None = None) -> list[Detection]:
        """The detections this listener would have made at another threshold or smoothing, from its recorded trace
        (record=True) of a flushed stream: the posteriors depend on neither, so one pass of the model gives a whole
        operating curve per smoothing length. The averages are the live ones' floating-point sums, in order."""
        threshold = self.threshold if threshold is None else threshold
        smooth = self.smooth if smooth is None else smooth
        if self.trace is None or smooth < 1:
            raise StreamError("replay needs a listener made with record=True, and smooth >= 1")
        if smooth not in self._replays:
            self._replays[smooth] = self._smoothed(smooth)
        t, when, emitted, score, keyword = self._replays[smooth]
        last, found = None, []
        for i in np.flatnonzero(score >= threshold):
            if last is None or when[i] - last >= self.refractory:
                last = when[i]
                found.append(Detection(self.model.classes[keyword[i]], float(t[i]), float(score[i]),
                                       float(emitted[i])))
        return found

    def _smoothed(self, smooth: int):
        """Every decision of a stream smoothed over `smooth` hops, flush included: its time (seconds, and half hops),
        emission time, the likeliest keyword's smoothed posterior and the keyword (as `fires` picks it)."""
        n, s = len(self.trace), smooth
        if not n:
            return (np.zeros(0), np.zeros(0, int), np.zeros(0), np.zeros(0), np.zeros(0, int))
        samples = np.array([h for h, _ in self.trace])
        posts = np.array([p for _, p in self.trace])
        pad = np.zeros((s - 1, posts.shape[1]))
        padded = np.concatenate([pad, posts, pad])  # window k covers trace rows k - s + 1 .. k (the real ones)
        sums = padded[:n + s - 1].copy()
        for j in range(1, s):  # oldest first, as the live mean over the deque adds them
            sums += padded[j:j + n + s - 1]
        k = np.arange(n + s - 1)
        counts = np.minimum(k, n - 1) - np.maximum(0, k - s + 1) + 1
        live = (k < n) | (k >= max(n, s))  # the stream's windows, then flush's shrinking ones
        k, counts = k[live], counts[live]
        smoothed = sums[live] / counts[:, None]
        hop_samples = samples[np.minimum(k, n - 1)]
        t = (hop_samples - (counts - 1) / 2 * self.hop) / self.cfg.sample_rate
        when = 2 * (hop_samples // self.hop) - (counts - 1)
        kw = smoothed[:, self.keywords]
        best = kw.argmax(1)  # the first of equal maxima, as fires' max() takes
        return (t, when, hop_samples / self.cfg.sample_rate, kw[np.arange(len(kw)), best],
                np.asarray(self.keywords)[best])

    def stats(self) -> dict:
        """Per-hop latencies (features incremental and, if compared, recomputed in full; model) of the latest
        LATENCY_HOPS hops."""
        sr = self.cfg.sample_rate
        feats, full, model = _summary(self.features_ms), _summary(self.full_ms), _summary(self.model_ms)
        total = [a + b for a, b in zip(self.features_ms, self.model_ms)]
        return dict(model=self.model.name, hops=self.hops, hop_ms=1e3 * self.hop / sr, window=self.model.window,
                    window_ms=1e3 * self.cfg.clip_samples / sr, new_frames=self.new_frames,
                    frames=self.cfg.n_frames, features=feats, full_features=full, model_run=model,
                    total=_summary(total),
                    features_saving=full and full["median_ms"] / feats["median_ms"],
                    real_time_factor=float(np.mean(total)) / (1e3 * self.hop / sr) if total else None)


def _model(model) -> Model:
    return model if isinstance(model, Model) else load_model(model)


def listen_wav(model, wav_path, hop_ms: float = 100.0, *, threshold: float = 0.7, smooth: int | None = None,
               refractory_s: float | None = None, compare_full: bool = True) -> tuple[list[Detection], dict]:
    """Stream a WAV file (any rate, channels averaged) through the listener, one hop at a time."""
    model = _model(model)
    x, sr = read_wav(wav_path)
    lis = Listener(model, hop_ms, threshold, smooth, refractory_s, compare_full)
    x = resample(x, sr, model.feature_cfg.sample_rate)
    x = np.pad(x, (0, max(0, model.feature_cfg.clip_samples - len(x))))  # a short clip: padded as to_clip does
    for start in range(0, len(x), lis.hop):
        lis.push(x[start:start + lis.hop])
    lis.flush()
    return lis.detections, lis.stats()


def listen_microphone(model, hop_ms: float = 100.0, *, threshold: float = 0.7, smooth: int | None = None,
                      refractory_s: float | None = None, seconds: float | None = None, device=None,
                      on_detection: Callable[[Detection], None] | None = None) -> tuple[list[Detection], dict]:
    """Listen to the default (or given) input device until `seconds` have passed or Ctrl-C."""
    try:
        import sounddevice as sd
    except (ImportError, OSError) as e:  # OSError: the package is there but PortAudio is not
        raise StreamError(f"listening to a microphone needs sounddevice (pip install sounddevice): {e}") from None
    model = _model(model)
    lis = Listener(model, hop_ms, threshold, smooth, refractory_s)
    chunks: queue.Queue = queue.Queue()  # the audio thread only enqueues; the model runs here
    try:
        with sd.InputStream(samplerate=lis.cfg.sample_rate, channels=1, dtype="float32", blocksize=lis.hop,
                            device=device, callback=lambda data, *_: chunks.put(data[:, 0].copy())):
            while seconds is None or lis.samples < seconds * lis.cfg.sample_rate:
                for det in lis.push(chunks.get()):
                    if on_detection:
                        on_detection(det)
    except KeyboardInterrupt:
        pass
    except sd.PortAudioError as e:  # no such device, or it cannot record at the model's rate
        raise StreamError(f"microphone: {e}") from None
    return lis.detections, lis.stats()


def format_detection(d: Detection) -> str:
    return f"{d.time_s:8.2f} s  {d.keyword:<10} {d.score:.3f}"


def format_latency(stats: dict) -> str:
    """The per-hop latency summary of Listener.stats()."""
    f, full, m = stats["features"], stats["full_features"], stats["model_run"]
    if f is None:
        return "no complete hop"
    lines = [f"{stats['hops']} hops of {stats['hop_ms']:g} ms over a {stats['window_ms']:g} ms window, "
             f"{stats['model']}; per hop, median (p90):",
             f"  features {f['median_ms']:.3f} ms ({f['p90_ms']:.3f}), incremental: "
             f"{stats['new_frames']} new of {stats['frames']} frames"]
    if full:
        lines.append(f"  features recomputed in full {full['median_ms']:.3f} ms ({full['p90_ms']:.3f}): "
                     f"incremental is {stats['features_saving']:.1f}x cheaper")
    how = (f"streaming, {stats['new_frames']} frame(s) a hop through its state, attention over the last "
           f"{stats['window']} frames" if stats.get("window") else "the whole window")
    lines.append(f"  model ({how}) {m['median_ms']:.3f} ms ({m['p90_ms']:.3f}); total "
                 f"{stats['total']['median_ms']:.3f} ms, real-time factor {stats['real_time_factor']:.4f}")
    return "\n".join(lines)


def format_detections(detections: list[Detection], stats: dict) -> str:
    """Detections one per line (time, keyword, smoothed score), then the latency summary."""
    return "\n".join([format_detection(d) for d in detections] or ["no detections"]) + "\n" + format_latency(stats)


def listen_command(model, wav=None, hop_ms: float = 100.0, threshold: float = 0.7, smooth: int | None = None,
                   mic: bool = False, echo: Callable[[str], None] = print,
                   window: int | None = None) -> tuple[list[Detection], dict]:
    """What `edgeosc listen MODEL (--wav FILE | --mic) [--window W]` does: run, echo detections and latencies."""
    if (wav is None) == (not mic):
        raise StreamError("give either a WAV file or the microphone, not both or neither")
    model = model if isinstance(model, Model) else load_model(model, window=window)
    if mic:
        echo(f"listening with {model.name}; Ctrl-C stops")
        dets, stats = listen_microphone(model, hop_ms, threshold=threshold, smooth=smooth,
                                        on_detection=lambda d: echo(format_detection(d)))
        echo(format_latency(stats))
    else:
        dets, stats = listen_wav(model, wav, hop_ms, threshold=threshold, smooth=smooth)
        echo(format_detections(dets, stats))
    return dets, stats
