"""Typed configuration, defined once. Every artifact saves the config it was made with."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

KEYWORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
UNKNOWN, SILENCE = "_unknown_", "_silence_"
KWS12_CLASSES = (SILENCE, UNKNOWN) + KEYWORDS  # the conventional 12-class Speech Commands task


def is_keyword(name: str) -> bool:
    """A class a detector fires on: any but the keyword-free _silence_ and _unknown_."""
    return name not in (SILENCE, UNKNOWN)


DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

ATTENTION_KINDS = ("oscillator", "softmax", "kuramoto", "ds-cnn")  # the model kinds; ds-cnn: no attention
FLOAT_ONLY = ("kuramoto",)  # kinds with no int8 path: the pipeline trains, exports and times them in float
POSITIVE_MAPS = ("softplus", "elu1", "relu2", "taylor2", "cos2")
POLYNOMIAL_MAPS = ("taylor2", "cos2")  # positive maps with a finite feature map: the linear form needs one
PHASE_MAPS, PHASE_READOUTS = ("angle", "tanh", "linear"), ("linear", "prototype")  # the Kuramoto network's
FORMS = ("direct", "linear")  # the oscillator core: T x T passes, or sums over keys (models/attention.py)
NORMALIZE_MODES = ("none", "utterance", "active", "running")  # features.py: which per-band mean each clip loses
CAUSAL_NORMALIZE = ("running", "none")  # the modes a stream can compute (neither looks ahead)


DATASETS = ("synth", "speech-commands", "fsdd")
# model sizes, smallest first: each kind's presets (models/kws.py, models/dscnn.py); tiny to base span about 0.5x
# to 3x the small model's MACs, medium is Hello Edge's DS-CNN-M and its transformer counterpart
MODEL_SIZES = ("tiny", "small", "base", "medium")


@dataclass(frozen=True)
class DataConfig:
    """Which clips: the embedded synthetic set, or a user's Speech Commands / FSDD download."""

    dataset: str = "synth"
    data_dir: str | None = None  # required for speech-commands and fsdd
    task: str = "12"  # "12" (10 words + unknown + silence); speech-commands: or "all" words; synth: or "digits"
    seed: int = 0  # synthetic set and class balancing
    n_voices: int | None = None  # synth and synth_mix: None = every voice variant
    renditions: int = 4  # synth and synth_mix: clips per voice and class
    test_speakers: tuple[str, ...] = ()  # fsdd leave-speakers-out; empty = loader default
    val_speakers: tuple[str, ...] = ()
    # real speech: also train on every synthetic voice saying the same classes, band-limited to the recordings'
    synth_mix: bool = False
    # always-on detectors: this many hours of keyword-free audio (data/negatives.py's training pool, never the
    # evaluation's), cut into 1 s clips labelled _unknown_, join the training split
    negatives_hours: float = 0.0
    # hard-negative mining (mining.py): the windows of this many hours of the same training pool on which the checkpoint
    # `hard_negatives_from` says a keyword (its false alarms) join the training split as _unknown_ too
    hard_negatives_hours: float = 0.0
    hard_negatives_from: str = ""

    def __post_init__(self):
        if self.dataset not in DATASETS:
            raise ValueError(f"unknown dataset {self.dataset!r}; choose from {DATASETS}")
        tasks = {"synth": ("12", "digits"), "speech-commands": ("12", "all"), "fsdd": ("12",)}[self.dataset]
        if self.task not in tasks:
            raise ValueError(f"task {self.task!r} does not apply to {self.dataset}; choose from {tasks}")
        if self.dataset != "synth" and not self.data_dir:
            raise ValueError(f"dataset {self.dataset!r} needs --data-dir pointing at your download")
        if self.negatives_hours < 0:
            raise ValueError(f"negatives_hours must be >= 0, got {self.negatives_hours}")
        if self.hard_negatives_hours < 0 or bool(self.hard_negatives_hours) != bool(self.hard_negatives_from):
            raise ValueError("hard-negative mining needs both hard_negatives_hours > 0 and hard_negatives_from (the "
                             "checkpoint whose false alarms are mined)")
        if self.synth_mix and (self.dataset == "synth" or self.task == "all"):
            raise ValueError("synth_mix adds synthetic voices to real speech: fsdd, or speech-commands task 12")


@dataclass(frozen=True)
class FeatureConfig:
    """Log-mel (n_mfcc = 0) or MFCC frames, the arm_mfcc_f32 definition (see features.py)."""

    sample_rate: int = 16000
    clip_samples: int = 16000  # 1 s clips
    frame_length: int = 512  # 32 ms window = FFT length (CMSIS-DSP needs a power of two)
    hop_length: int = 320  # 20 ms hop -> 49 frames per second
    n_mels: int = 40
    n_mfcc: int = 0  # 0: log-mel (40 coefficients); > 0: that many DCT-II coefficients
    f_min: float = 20.0
    f_max: float = 7600.0
    normalize: str = "utterance"  # "none" | "utterance": subtract each clip's per-band mean | "active": over its speech
    #                                 | "running": each frame less the mean of the frames up to it (causal: streams)
    floor_db: float = 0.0  # > 0: log-mels floored this many dB below the clip's peak (frontend.py); 0 = off

    def __post_init__(self):
        if self.sample_rate < 1 or self.n_mels < 1:
            raise ValueError(f"need sample_rate >= 1 and n_mels >= 1, got {self.sample_rate}, {self.n_mels}")
        n = self.frame_length
        if n < 32 or n > 4096 or n & (n - 1):  # arm_rfft_fast_f32 supports powers of two 32..4096
            raise ValueError(f"frame_length must be a power of two in 32..4096, got {n}")
        if self.hop_length < 1 or self.clip_samples < n:
            raise ValueError("need hop_length >= 1 and clip_samples >= frame_length")
        if not 0 <= self.f_min < self.f_max <= self.sample_rate / 2:
            raise ValueError(f"need 0 <= f_min < f_max <= sample_rate/2, got {self.f_min}, {self.f_max}")
        if not 0 <= self.n_mfcc <= self.n_mels:
            raise ValueError(f"n_mfcc must be in 0..n_mels ({self.n_mels}), got {self.n_mfcc}")
        if self.normalize not in NORMALIZE_MODES:
            raise ValueError(f"normalize must be one of {NORMALIZE_MODES}, got {self.normalize!r}")
        if self.floor_db and self.normalize == "running":
            raise ValueError("floor_db looks at the whole clip's peak: it cannot go with the causal normalize 'running'")
        if self.floor_db < 0 or (self.floor_db and self.n_mfcc):
            raise ValueError(f"floor_db must be >= 0 and needs log-mel features (n_mfcc = 0), got {self.floor_db} "
                             f"with n_mfcc = {self.n_mfcc}")

    @property
    def n_frames(self) -> int:
        return 1 + (self.clip_samples - self.frame_length) // self.hop_length

    @property
    def n_coeffs(self) -> int:
        return self.n_mfcc or self.n_mels


# Recordings read by the FSDD loader (speakers' digits, padded with digital silence to 1 s) take each band's mean over
# the clip's active frames, every kind alike: +3 to +12 points on unseen speakers (docs/results.md#fsdd); the synthetic
# set keeps the per-clip mean (its noisy clips have no padding, and lose 1-2 points with it). Every kind also reads
# DS-CNN's front end there, MLPerf Tiny's 10 MFCCs from 40 bands to 4 kHz (REAL_SPEECH_FEATURES). A stream's
# features need a causal mean: streaming models keep theirs.
REAL_SPEECH_DATASETS = ("fsdd",)
REAL_SPEECH_FEATURES = ({"normalize": "active"}, {"n_mfcc": 10, "f_max": 4000.0})  # each group given whole or not


def with_dataset_defaults(data: dict, model: dict, features: dict) -> dict:
    """A features table (a config spec's, as TOML gives it) with the defaults that follow the dataset: for the
    whole-clip models of REAL_SPEECH_DATASETS, each group of REAL_SPEECH_FEATURES of which the table gives no key."""
    if data.get("dataset") not in REAL_SPEECH_DATASETS or model.get("window"):
        return features
    return {**{k: v for group in REAL_SPEECH_FEATURES if not set(group) & set(features) for k, v in group.items()},
            **features}


# DS-CNN's input as MLPerf Tiny's KWS benchmark computes it: 49 x 10 MFCC from 40 mel bands over 20-4000 Hz, 20 ms
# hops (docs/results.md#ds-cnn says where our MFCC differs: a 32 ms window, arm_mfcc_f32's DCT, the per-band mean).
MLPERF_FEATURES = FeatureConfig(n_mels=40, n_mfcc=10, f_min=20.0, f_max=4000.0)

# The oscillator's own settings and the values every other kind holds for them (ModelConfig sets these): one [model]
# table serves several kinds (the pipeline, sweeps), its oscillator settings applying to the oscillator only.
NOT_OSCILLATOR = dict(d_osc=2, p=4, positive="taylor2", anchors="projected", key_gate=False, gate_map="", form="direct",
                      rotate_anchors=True, d_head=0)
# The direct core of the earlier reports (T x T passes, d_osc 8, relu2, no key gate): ModelConfig(**DIRECT_OSCILLATOR)
DIRECT_OSCILLATOR = dict(d_osc=8, positive="relu2", key_gate=False, form="direct")


def model_of_kind(model: "ModelConfig", kind: str) -> "ModelConfig":
    """The model settings for one attention kind (the oscillator's own settings reset for the others)."""
    return dataclasses.replace(model, attention=kind)


@dataclass(frozen=True)
class ModelConfig:
    """A keyword-spotting network; `size` names a preset in models/kws.py (dims below override). The defaults are the
    oscillator the pipeline ships (docs/results.md#the-linear-core): the linear core at d_osc 2 with the key gate.
    For another kind, the oscillator's settings hold NOT_OSCILLATOR's values whatever is given."""

    attention: str = "oscillator"
    size: str = "small"
    n_classes: int = 12
    n_frames: int = 49
    n_coeffs: int = 40
    d_model: int = 0  # 0: the size preset's value
    heads: int = 0  # 0: the size preset's value (the whole-clip oscillator's: d_model / d_head where d_head > 0)
    blocks: int = 0
    # the oscillator's settings; what each is worth: docs/results.md#levers
    d_head: int = 0  # > 0: the whole-clip oscillator's head width, heads = d_model / d_head; 0: the preset's heads
    d_osc: int = 2
    p: int = 4
    positive: str = "taylor2"
    anchors: str = "projected"  # "projected": own projection R; "tied": first d_osc key coordinates
    key_gate: bool = True  # a learned weight per key in the readout (attention.py, docs/maths.md#key-gate)
    gate_map: str = ""  # the key gate's positive map; "": the coupling's (positive)
    form: str = "linear"  # oscillator core: "direct" (T x T passes) or "linear" (sums over keys; positive taylor2)
    score_scale: float = 4.0  # initial value of the learned per-head scale on q k^T / sqrt(d_h)
    eps: float = 1e-6
    dropout: float = 0.1
    # the Kuramoto network's own settings (docs/results.md#kuramoto-attention measures each)
    phase_map: str = "angle"  # features -> phases: "angle" (atan2 of two projections), "tanh" (pi tanh), "linear"
    max_step: float = 1.0  # norm cap on each phase increment, as radians per coordinate (cap sqrt(d_model) x this)
    phase_readout: str = "linear"  # circular means -> logits: "linear" (a weight per class and cos / sin), "prototype"
    feed_forward: bool = True  # the SwiGLU increment after each Kuramoto attention increment
    # the streaming variant (docs/maths.md#streaming): > 0 makes the network causal, each attention layer reading the
    # last `window` frames (the linear oscillator core's sums, softmax's key/value cache), the stem left-padded, the
    # pooling a running mean over the window, positions relative (no absolute embedding); a stream then costs one
    # frame's work per hop (KWSTransformer.stream_step)
    window: int = 0
    rotate_anchors: bool = True  # streaming oscillator: anchors turn by a learned per-head angle per frame
    # streaming softmax: a fixed penalty per frame of distance on each head's scores (ALiBi, Press et al. 2022:
    # slopes 2^(-8 h / H)), its relative position; off: the causal stem is its only position signal
    distance_bias: bool = False

    def __post_init__(self):
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"unknown attention kind {self.attention!r}; choose from {ATTENTION_KINDS}")
        if self.positive not in POSITIVE_MAPS:
            raise ValueError(f"unknown positive map {self.positive!r}; choose from {POSITIVE_MAPS}")
        if self.anchors not in ("projected", "tied"):
            raise ValueError(f"unknown anchors {self.anchors!r}; choose 'projected' or 'tied'")
        if self.attention != "oscillator":
            for name, value in NOT_OSCILLATOR.items():
                object.__setattr__(self, name, value)
        if self.distance_bias and self.attention != "softmax":
            raise ValueError("distance_bias is the streaming softmax's relative position (the oscillator's: "
                             "rotate_anchors)")
        if self.gate_map and self.gate_map not in POSITIVE_MAPS:
            raise ValueError(f"unknown gate map {self.gate_map!r}; choose from {POSITIVE_MAPS}")
        if self.d_osc < 1 or self.p < 1 or self.d_head < 0:
            raise ValueError("d_osc and p must be >= 1, d_head >= 0")
        if self.phase_map not in PHASE_MAPS or self.phase_readout not in PHASE_READOUTS or not self.max_step > 0:
            raise ValueError(f"Kuramoto settings: phase_map in {PHASE_MAPS}, phase_readout in {PHASE_READOUTS}, "
                             f"max_step > 0; got {self.phase_map!r}, {self.phase_readout!r}, {self.max_step}")
        if self.form not in FORMS:
            raise ValueError(f"unknown form {self.form!r}; choose from {FORMS}")
        if self.window < 0 or (self.window and not (self.attention == "softmax" or (
                self.attention == "oscillator" and self.form == "linear" and self.d_osc == 2))):
            raise ValueError(f"window {self.window}: the streaming variant (window > 0) is for softmax attention or "
                             "the linear oscillator core at d_osc 2 (form 'linear'), and window >= 0")
        if self.form == "linear" and self.positive not in POLYNOMIAL_MAPS:
            raise ValueError(f"form 'linear' needs a polynomial positive map ({', '.join(POLYNOMIAL_MAPS)}), not "
                             f"positive {self.positive!r} (the direct core: form 'direct')")


@dataclass(frozen=True)
class AugmentConfig:
    time_shift_ms: float = 100.0
    noise_prob: float = 0.8
    snr_db: tuple[float, float] = (5.0, 30.0)
    gain_db: tuple[float, float] = (-6.0, 6.0)
    speed: tuple[float, float] = (1.0, 1.0)  # speed (and pitch/formant) factor range; (1, 1) = off
    # the channel: each clip through y[n] = x[n] - a x[n-1], a uniform in [-tilt, tilt], RMS kept (a > 0 lifts the
    # highs against the lows, as another microphone or voice does; 0.6: about +4 dB / -8 dB at the band's ends); 0 = off
    tilt: float = 0.0
    # SpecAugment-style masking of the features (each band set to its silence level in the clip)
    freq_masks: int = 0  # masks per clip, each up to freq_width coefficients
    freq_width: int = 8
    time_masks: int = 0  # masks per clip, each up to time_width frames
    time_width: int = 8

    def __post_init__(self):
        if not 0 <= self.tilt < 1:
            raise ValueError(f"augment tilt must be in [0, 1) (the largest |a| of x[n] - a x[n-1]), got {self.tilt}")


STREAM_AFTER = ("clips", "keyword-free")
STREAM_LOSS = ("last", "max")


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 80  # docs/notebook.md#training-for-80-epochs: 40 epochs with early stopping left both kinds short
    batch_size: int = 64
    lr: float = 1e-2
    weight_decay: float = 0.05
    warmup_epochs: int = 1
    grad_clip: float = 1.0
    label_smoothing: float = 0.05
    mixup: float = 0.0  # alpha of mixup's Beta(alpha, alpha) mixing weight on feature batches; 0 = off
    # streaming models: train on streams, each clip after this many other clips of the split as one recording, its
    # features with the listener's sliding mean and the loss on its last frame, so that every frame has the past a
    # stream gives it (a clip alone gives frame i only frames 0..i); 0 = off (docs/results.md#always-on-streaming)
    stream_clips: int = 0
    # what those clips are: "clips", any of the split; "keyword-free", the training split's clips without a keyword
    # (_unknown_, _silence_, --train-negatives' audio), as the always-on protocol puts keywords after other audio
    stream_after: str = "clips"
    # the frame of a stream that each clip's loss is on: "last", its last frame; "max", the max-pooling loss (Sun et
    # al., SLT 2016) over the clip's frames: a keyword clip's frame where its keyword is likeliest, a keyword-free
    # clip's where its own class is least likely, so a detector fires where it hears the keyword best
    stream_loss: str = "last"
    patience: int = 80  # early stopping on validation accuracy (epochs without a new best); 80 = off
    seed: int = 0
    device: str = "auto"  # "auto" | "cpu" | "cuda"
    init_from: str | None = None  # a float checkpoint of the same network whose weights start training
    # knowledge distillation: a float checkpoint of any kind on the same classes (its own features) whose softened
    # posteriors the loss also matches, distill_weight of it at temperature distill_temperature (Hinton et al. 2015)
    distill_from: str | None = None
    distill_weight: float = 0.5
    distill_temperature: float = 2.0
    augment: AugmentConfig = field(default_factory=AugmentConfig)

    def __post_init__(self):
        if not 0 <= self.distill_weight <= 1 or not self.distill_temperature > 0:
            raise ValueError(f"need 0 <= distill_weight <= 1 and distill_temperature > 0, got {self.distill_weight}, "
                             f"{self.distill_temperature}")
        if self.mixup < 0:
            raise ValueError("mixup must be >= 0 (the alpha of its Beta distribution; 0 = off)")
        if self.stream_clips < 0:
            raise ValueError("stream_clips must be >= 0 (clips of a stream before each training clip; 0 = off)")
        if self.stream_after not in STREAM_AFTER:
            raise ValueError(f"stream_after must be one of {STREAM_AFTER}, got {self.stream_after!r}")
        if self.stream_loss not in STREAM_LOSS:
            raise ValueError(f"stream_loss must be one of {STREAM_LOSS}, got {self.stream_loss!r}")
        if self.stream_loss != "last" and not self.stream_clips:
            raise ValueError(f"stream_loss {self.stream_loss!r} picks frames of a stream: it needs stream_clips > 0")


QUANT_PRESETS = ("int8", "w4a8")  # Brevitas quantizers in quant.py; the names live here for the CLI
QAT_EPOCHS, QAT_LR = 10, 3e-4  # QAT fine-tuning defaults: a float-trained start needs a short, gentle run


@dataclass(frozen=True)
class QuantConfig:
    """Quantization: a preset of quant.py; activation scales calibrated on training batches, then QAT."""

    preset: str = "int8"
    calibration_batches: int = 8  # train-split batches (no augmentation) for the activation statistics

    def __post_init__(self):
        if self.preset not in QUANT_PRESETS:
            raise ValueError(f"unknown quantization preset {self.preset!r}; choose from {QUANT_PRESETS}")
        if self.calibration_batches < 1:
            raise ValueError("calibration_batches must be >= 1")


@dataclass(frozen=True)
class ExportConfig:
    """Model file export (export/): ONNX opset of every file."""

    opset: int = 17  # Brevitas' QCDQ export is tested at 17; LayerNormalization needs >= 17


@dataclass(frozen=True)
class BenchConfig:
    """Latency benchmarks of exported models (bench/latency.py): batch 1, interleaved runs."""

    runs: int = 200
    warmup: int = 20
    threads: int = 1
    # estimates (bench/estimate.py): the cores the firmware is emulated on, and the attention-core sweep
    targets: tuple[str, ...] = ("cortex-m4", "cortex-m7", "cortex-m33", "cortex-a53", "cortex-a72")
    scaling_tokens: tuple[int, ...] = (25, 49, 98, 196)
    scaling_d_osc: tuple[int, ...] = (2, 4, 8, 16)
    # always-on (estimate.stream_cycles): windows W of the streaming variant, one frame per hop_ms
    stream_windows: tuple[int, ...] = (49, 98, 196)
    hop_ms: float = 20.0


@dataclass(frozen=True)
class AlwaysOnConfig:
    """The pipeline's always-on stage: each attention kind's streaming variant trained with the always-on recipe
    (streams of keyword-free audio then a clip, mining rounds that accumulate) and scored on the always-on protocol
    (the test split's keywords in context; false alarms per hour of keyword-free audio never trained on).
    docs/results.md#always-on-streaming. The defaults are a short schedule that fits `make demo`; the recipe's:
    epochs 40, negatives_hours 0.5, mining_rounds 2, mine_hours 2, mine_epochs 30, eval_hours 1, eval_clips 0."""

    enabled: bool = True
    window: int = 49  # frames each attention layer reads (model.window)
    epochs: int = 6  # the first model's, on streams after keyword-free audio (train.stream_clips 2)
    negatives_hours: float = 0.25  # keyword-free training audio (data.negatives_hours)
    mining_rounds: int = 1  # each: the last model's false alarms on mine_hours of the training pool join the rest
    mine_hours: float = 0.25
    mine_epochs: int = 3  # each round's training, from the last model's weights
    eval_hours: float = 0.25  # keyword-free audio the false alarms per hour are counted on
    eval_clips: int = 300  # a random subset of the test split's clips heard in context; 0: all of them
    hop_ms: float = 20.0

    def __post_init__(self):
        if self.window < 1 or self.epochs < 1 or self.mine_epochs < 1 or min(self.mining_rounds, self.eval_clips) < 0:
            raise ValueError("always_on: window, epochs and mine_epochs must be >= 1, mining_rounds and eval_clips "
                             ">= 0")
        if min(self.negatives_hours, self.mine_hours, self.eval_hours, self.hop_ms) <= 0:
            raise ValueError("always_on: negatives_hours, mine_hours, eval_hours and hop_ms must be > 0")


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def from_dict(cls, d: dict, base=None):
    """Rebuild a (possibly nested) frozen dataclass from to_dict output; unknown keys are an error. Fields d leaves
    out keep base's values (a default instance of cls; else the class defaults)."""
    kwargs = {}
    hints = {f.name: f for f in dataclasses.fields(cls)}
    for k, v in d.items():
        if k not in hints:
            raise ValueError(f"{cls.__name__} has no field {k!r}")
        default = hints[k].default_factory() if hints[k].default_factory is not dataclasses.MISSING else hints[k].default
        if dataclasses.is_dataclass(default):
            if not isinstance(v, dict):
                raise ValueError(f"{cls.__name__}.{k} is a table of fields, not {v!r}")
            v = from_dict(type(default), v, default)
        elif isinstance(default, tuple) and isinstance(v, list):
            v = tuple(v)
        elif isinstance(default, float) and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if default is not None and not dataclasses.is_dataclass(default) and (
                type(v) is not type(default) and not (isinstance(default, tuple) and isinstance(v, tuple))):
            raise ValueError(f"{cls.__name__}.{k} must be {type(default).__name__}, not {v!r}")
        kwargs[k] = v
    return cls(**kwargs) if base is None else dataclasses.replace(base, **kwargs)
