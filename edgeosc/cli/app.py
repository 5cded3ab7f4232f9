"""The `edgeosc` group, what its commands share (errors as one line, ordered help, common options), and the config
flags the commands take (options.config_options is the one door config fields reach the command line through)."""
from __future__ import annotations

import functools

import click

from ..config import QAT_EPOCHS, QAT_LR


def friendly_errors(fn):
    """Known user-facing problems become one line on stderr and exit status 1, never a traceback."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from ..runtime import InterpreterUnavailable  # torch-free: `edgeosc bench models` runs without torch
        try:
            return fn(*args, **kwargs)
        except (ValueError, FileNotFoundError, InterpreterUnavailable) as e:  # bad data, checkpoints, model files
            raise click.ClickException(str(e)) from None
        except KeyboardInterrupt:
            raise click.ClickException("interrupted; rerun with --resume to continue from the last epoch") from None
    return wrapper


class Ordered(click.Group):
    """A group that lists its commands in the order they were added (the pipeline's), and names renamed ones."""

    def __init__(self, *args, renamed: dict[str, str] | None = None, **kw):
        super().__init__(*args, **kw)
        self.renamed = renamed or {}

    def list_commands(self, ctx):
        return list(self.commands)

    def resolve_command(self, ctx, args):
        if args and args[0] not in self.commands:
            for old, new in self.renamed.items():
                if args[0] == old or (old == "*" and not args[0].startswith("-")):
                    raise click.UsageError(f"`{ctx.command_path} {args[0]}`: {new}", ctx=ctx)
        return super().resolve_command(ctx, args)


RENAMED = {"compare": "now `edgeosc report write`", "summary": "now `edgeosc report seeds`",
           "export-bench": "now `edgeosc bench pair`", "microbench": "now `edgeosc bench attention`",
           "dynamics": "now `edgeosc lab dynamics`"}


@click.group(cls=Ordered, renamed=RENAMED, context_settings=dict(help_option_names=["-h", "--help"]))
def main():
    """Keyword spotting with softmax-free oscillator attention, from data to edge runtimes.

    The commands follow the pipeline (data, train, eval, export, bench, report, deploy); `edgeosc pipeline`
    runs it all, staged and resumable. Every config field is settable with --config FILE or --set
    SECTION.FIELD=VALUE; `edgeosc train --print-config` lists them.
    """


# ------------------------------------------------------------------- flags the commands share

DATA_FLAGS = [
    ("--dataset", "data.dataset", "synth: embedded eSpeak NG keywords (no download); speech-commands / fsdd: your download"),
    ("--data-dir", "data.data_dir", "Folder of the downloaded dataset"),
    ("--task", "data.task", "12: 10 words + unknown + silence; all: every Speech Commands word as a class; "
                            "digits: the synthetic set speaks FSDD's ten digits (to pretrain for FSDD)"),
    ("--data-seed", "data.seed", "Seed of the synthetic set / class balancing"),
    ("--n-voices", "data.n_voices", "Synthetic set: number of voice variants (default all)"),
    ("--renditions", "data.renditions", "Synthetic set: clips per voice and class"),
    ("--test-speakers", "data.test_speakers", "FSDD: speakers held out for test"),
    ("--val-speakers", "data.val_speakers", "FSDD: speakers held out for validation"),
    ("--synth-mix", "data.synth_mix", "Real speech: also train on every synthetic voice (eSpeak NG, 11 recorded "
                                      "speakers) saying the same classes, band-limited to the recordings' band"),
]
CACHE_DIR = click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
                         help="Decoded-clip cache (default $EDGEOSC_CACHE or ~/.cache/edgeosc).")
QUIET = click.option("--quiet", is_flag=True, help="No progress bars.")


def describe(data) -> str:
    import numpy as np
    counts = {s: len(data.indices(s)) for s in ("train", "val", "test")}
    groups = {s: len(np.unique(data.groups[data.split == s])) for s in counts}
    return (f"{len(data.audio)} clips, {len(data.classes)} classes; " +
            ", ".join(f"{s} {counts[s]} ({groups[s]} speakers)" for s in counts) +
            (f"; skipped {len(data.skipped)} files" if data.skipped else ""))


TRAIN_FLAGS = DATA_FLAGS + [
    ("--attention", "model.attention", "Model kind: an attention layer, or ds-cnn (MLPerf Tiny's KWS reference, no "
     "attention; its features default to MLPerf's 49 x 10 MFCC)"),
    ("--size", "model.size", "tiny / small / base: about 0.5x / 1x / 3x the MACs (small: ~23k parameters); "
     "medium: ~170k"),
    ("--d-head", "model.d_head", "The whole-clip oscillator's head width: heads = d_model / d_head (4: twice the "
     "heads; 0: the size preset's, d_h 8)"),
    ("--d-osc", "model.d_osc", "Oscillator dimension"),
    ("--p", "model.p", "Readout sharpening power"),
    ("--positive", "model.positive", "Positive map of the coupling weights"),
    ("--key-gate", "model.key_gate", None),
    ("--gate-map", "model.gate_map", "The key gate's positive map (default: the coupling's)"),
    ("--form", "model.form", None),
    ("--dropout", "model.dropout", "Dropout rate"),
    ("--phase-map", "model.phase_map", "Kuramoto: how features become phases"),
    ("--max-step", "model.max_step", "Kuramoto: norm cap on each phase increment, radians per coordinate (RMS)"),
    ("--phase-readout", "model.phase_readout", None),
    ("--feed-forward", "model.feed_forward", None),
    ("--window", "model.window", "The streaming variant: > 0 makes the network causal, each attention layer "
     "reading the last WINDOW frames, so a stream costs one frame's work per hop (softmax, or the linear "
     "oscillator core at d_osc 2); 0: whole-clip attention"),
    ("--rotate-anchors", "model.rotate_anchors", None),
    ("--distance-bias", "model.distance_bias", "Streaming softmax: a fixed penalty per frame of distance on each "
     "head's scores (ALiBi's relative position); off: the causal stem is its only position signal"),
    ("--n-mfcc", "features.n_mfcc", "0: 40 log-mel bands (the synthetic set's default); >0: that many MFCCs (FSDD's "
     "whole-clip default: 10 from bands to 4 kHz, DS-CNN's front end, for every kind)"),
    ("--normalize", "features.normalize", "Per-clip mean subtraction of the features: over every frame "
     "(utterance; the synthetic set's default) or over the frames within 30 dB of the clip's loudest (active: for "
     "recordings padded with silence, FSDD's default); what a stream can compute: running (each frame less the mean "
     "of the second up to it) or none"),
    ("--floor-db", "features.floor_db", "Floor the log-mels this many dB below each clip's peak (0: off), so "
     "digital-silence padding looks like a quiet noise floor"),
    ("--epochs", "train.epochs", f"Training epochs (--qat: default {QAT_EPOCHS}; 0: PTQ only)"),
    ("--batch-size", "train.batch_size", "Batch size"),
    ("--lr", "train.lr", f"Peak learning rate (--qat: default {QAT_LR})"),
    ("--weight-decay", "train.weight_decay", "AdamW weight decay"),
    ("--patience", "train.patience", None),
    ("--mixup", "train.mixup", None),
    ("--train-negatives", "data.negatives_hours", "Always-on detectors: add this many hours of keyword-free audio "
     "(speech of other words, noise, music; never stream-eval's negatives), cut into 1 s clips, to the training "
     "split as _unknown_ (0: none)"),
    ("--mine-negatives", "data.hard_negatives_hours", "Always-on detectors, hard-negative mining: score this many "
     "hours of the same keyword-free training audio with --mine-with's model (a streaming one hears it as a "
     "stream) and add the 1 s windows where it says a keyword (its false alarms, posterior >= 0.1, one per 0.5 s) "
     "to the training split as _unknown_; usually with --init-from the same checkpoint and fewer --epochs"),
    ("--mine-with", "data.hard_negatives_from", "The checkpoint whose false alarms --mine-negatives mines (a "
     "checkpoint trained on mined windows passes them on: rounds of mining accumulate)"),
    ("--stream-clips", "train.stream_clips", "Streaming models: train on streams, each clip after this many others "
     "as one recording with the listener's features, so its frames see the past a stream gives them (0: off; "
     "needs --normalize running or none)"),
    ("--stream-after", "train.stream_after", "--stream-clips: what comes before each clip: 'clips' (any of the "
     "split) or 'keyword-free' (the training split's _unknown_, _silence_ and --train-negatives clips, as the "
     "always-on protocol puts keywords after other audio; validation and test streams use them too)"),
    ("--stream-loss", "train.stream_loss", "--stream-clips: the frame each clip's loss is on: 'last' (its last "
     "frame) or 'max' (max-pooling: a keyword clip's frame where its keyword is likeliest, a keyword-free clip's "
     "where its own class is least likely; validation accuracy picks its frames alike)"),
    ("--seed", "train.seed", "Training seed"),
    ("--device", "train.device", "Device"),
    ("--init-from", "train.init_from", "Start from the weights of a float checkpoint of the same network (e.g. "
     "trained on the synthetic set before real speech); a classifier for other classes starts afresh"),
    ("--distill-from", "train.distill_from", "Distil from a float checkpoint of any kind on the same classes (e.g. a "
     "DS-CNN): the loss also matches its softened posteriors (--set train.distill_weight / distill_temperature)"),
    ("--preset", "quant.preset", "--qat: quantization preset (edgeosc/quant.py)"),
    ("--calib-batches", "quant.calibration_batches", "--qat: training batches that calibrate the activation scales"),
]
NO_AUGMENT = {"train.augment.noise_prob": 0.0, "train.augment.time_shift_ms": 0.0, "train.augment.gain_db": [0.0, 0.0]}
