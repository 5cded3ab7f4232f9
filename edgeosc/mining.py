"""Hard-negative mining for always-on detectors: the windows of the keyword-free training pool
(data/negatives.py) on which a trained model says a keyword, its false alarms, join the training split as
_unknown_ for the next model (`edgeosc train --mine-negatives H --mine-with CKPT`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from .checkpoint import CheckpointError, load_checkpoint
from .config import UNKNOWN, DataConfig, is_keyword
from .data.negatives import VERSION, load_negatives_shown, with_unknown_class
from .features import FeatureExtractor
from .io import atomic_path, sha256_file


MINE_HOP_S = 0.05  # whole-clip models: 1 s windows of the training pool scored this far apart
MINE_CHUNK_S = 30.0  # streaming models: the pool run as a stream this many seconds at a time
MINE_THRESHOLD = 0.1  # a window is a hard negative when some keyword's posterior reaches this
MINE_SPACING_S = 0.5  # at most one mined window per half second (the strongest): a spike's neighbours say the same
MINE_VERSION = 2  # bump whenever mining changes: cached mined windows are mined again (2: streams heard as streams)


def strongest_apart(scores: np.ndarray, threshold: float, reach: int) -> list[int]:
    """Indices of the scores >= threshold, strongest first, each more than `reach` places from every one taken
    before it (a false alarm's neighbouring windows say the same thing)."""
    chosen, free = [], np.ones(len(scores), bool)
    for w in np.argsort(-scores, kind="stable"):
        if scores[w] < threshold:
            break
        if free[w]:
            chosen.append(int(w))
            free[max(0, w - reach): w + reach + 1] = False
    return chosen


def window_scores(model, features, x, keywords, batch: int = 256, progress: bool = True):
    """A whole-clip model's keyword posterior (the largest) on each 1 s window of x every MINE_HOP_S, each window a
    clip -> (scores, each window's first sample, the step between windows in samples)."""
    clip, step = features.cfg.clip_samples, round(MINE_HOP_S * features.cfg.sample_rate)
    windows = x.unfold(0, clip, step)  # [n, clip], a view
    scores = torch.empty(len(windows))
    for i in tqdm(range(0, len(windows), batch), desc="mining hard negatives", leave=False, disable=not progress):
        scores[i:i + batch] = model(features(windows[i:i + batch])).softmax(-1)[:, keywords].amax(-1)
    return scores.numpy(), step * np.arange(len(windows)), step


def stream_scores(model, features, x, keywords, chunk_s: float = MINE_CHUNK_S, progress: bool = True):
    """A streaming model's keyword posterior (the largest) at every frame of x heard as one stream, as the listener
    hears it (its features' sliding mean, each layer's window), from the first frame with a whole window behind it
    -> (scores, the first sample of each frame's window of n_frames, the hop in samples). Run `chunk_s` at a time,
    each chunk after the frames its first frame still depends on (feature mean, stem, each block's window, pooling)."""
    cfg, net = features.cfg, model.cfg
    hop, length = cfg.hop_length, cfg.frame_length
    reach = (cfg.n_frames - 1) + 2 + (net.blocks + 1) * (net.window - 1)  # frames of the past a frame's logits see
    frames, chunk = (len(x) - length) // hop + 1, max(cfg.n_frames, round(chunk_s * cfg.sample_rate / hop))
    scores = []
    for f0 in tqdm(range(0, frames, chunk), desc="mining hard negatives", leave=False, disable=not progress):
        f1 = min(frames, f0 + chunk)
        first = max(0, min(f0 - reach, f1 - cfg.n_frames))  # and at least one clip of audio
        feats = features.stream(x[first * hop: (f1 - 1) * hop + length][None])
        scores.append(model(feats, per_frame=True)[0, f0 - first:].softmax(-1)[:, keywords].amax(-1))
    starts = hop * (np.arange(frames) - (cfg.n_frames - 1))  # the listener decides once a whole window is in
    whole = (starts >= 0) & (starts + cfg.clip_samples <= len(x))
    return torch.cat(scores).numpy()[whole], starts[whole], hop


def mine_hard_negatives(checkpoint: str | Path, hours: float, seed: int, cache_dir: Path,
                        progress: bool = True, loaded=None) -> tuple[np.ndarray, dict]:
    """Hard-negative mining: the 1 s windows of `hours` of the training pool on which the checkpoint's model says a
    keyword with posterior >= MINE_THRESHOLD, the strongest per MINE_SPACING_S: a detector's false alarms, for
    training the next. A streaming model hears the pool as a stream (every frame, stream_scores), a whole-clip model
    sees a window every MINE_HOP_S (window_scores). -> (int16 clips [n, 1 s], what was mined). Cached by the
    checkpoint's hash and the settings (cache_dir/hard-negatives). `loaded`: the checkpoint, if the caller has it."""
    digest = sha256_file(checkpoint)
    meta = dict(checkpoint=str(checkpoint), sha256=digest, hours=hours, seed=seed, threshold=MINE_THRESHOLD,
                spacing_s=MINE_SPACING_S)
    path = Path(cache_dir) / "hard-negatives" / f"v{VERSION}.{MINE_VERSION}-{digest[:16]}-{hours:g}h-seed{seed}.npz"
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                return z["clips"], dict(meta, clips=len(z["clips"]), scores=z["scores"].tolist())
        except (OSError, ValueError, KeyError):
            path.unlink()  # a damaged cache file: mined again below
    ckpt = loaded or load_checkpoint(checkpoint)
    keywords = [i for i, c in enumerate(ckpt.classes) if is_keyword(c)]
    model, features = ckpt.model.eval(), FeatureExtractor(ckpt.feature_cfg)
    x = torch.from_numpy(load_negatives_shown(hours, seed, cache_dir, "training negatives", progress, pool="train"))
    with torch.no_grad():
        scores, starts, step = (stream_scores if ckpt.model_cfg.window else window_scores)(
            model, features, x, keywords, progress=progress)
    spacing = max(0, round(MINE_SPACING_S * features.cfg.sample_rate / step) - 1)
    chosen = strongest_apart(scores, MINE_THRESHOLD, spacing)
    clip = features.cfg.clip_samples
    clips = np.stack([np.round(x[s: s + clip].numpy() * 32767).astype(np.int16) for s in starts[chosen]]) if chosen \
        else np.zeros((0, clip), np.int16)  # the pool's own samples (it was int16)
    picked = scores[chosen]
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, clips=clips, scores=picked)
    return clips, dict(meta, clips=len(clips), scores=picked.tolist())


def with_hard_negatives(data, checkpoint: str | Path, hours: float, seed: int, cache_dir: Path,
                        progress: bool = True):
    """`data` plus the hard negatives `checkpoint` makes on `hours` of the training pool (mine_hard_negatives), in
    the training split as _unknown_. The checkpoint must be a model of these classes. Rounds accumulate: a checkpoint
    trained on mined windows passes them on (mined again from their checkpoint, cached), so each round adds its
    model's false alarms to every earlier round's instead of replacing them."""
    data = with_unknown_class(data)
    ckpt = load_checkpoint(checkpoint)
    classes = ckpt.classes
    if tuple(classes) != tuple(data.classes):
        raise CheckpointError(f"{checkpoint}: mining hard negatives needs a model of this task's classes "
                              f"{list(data.classes)}; it has {list(classes)}")
    earlier = ckpt.data_cfg
    if earlier.hard_negatives_hours:
        if not Path(earlier.hard_negatives_from).is_file():
            raise CheckpointError(f"{checkpoint}: it was trained on the windows that {earlier.hard_negatives_from} "
                                  "mined, and that checkpoint is missing: a new round keeps every earlier round's")
        data = with_hard_negatives(data, earlier.hard_negatives_from, earlier.hard_negatives_hours, earlier.seed,
                                   cache_dir, progress)
    clips, meta = mine_hard_negatives(checkpoint, hours, seed, cache_dir, progress, loaded=ckpt)
    n = len(clips)
    summary = {k: v for k, v in meta.items() if k != "scores"}
    rounds = [*data.meta.get("hard_negative_rounds", []), summary]
    return data.extended(clips, np.full(n, data.classes.index(UNKNOWN)), np.full(n, "hard-negatives"),
                         np.full(n, "train"), hard_negatives=summary, hard_negative_rounds=rounds)


def training_data(cfg: DataConfig, cache_dir=None, progress: bool = True):
    """load_dataset, plus the mined windows when cfg asks for them: the data a training run reads."""
    from .data import default_cache_dir, load_dataset  # looked up now: tests stand a small set in for it
    data = load_dataset(cfg, cache_dir, progress)
    if not cfg.hard_negatives_hours:
        return data
    return with_hard_negatives(data, cfg.hard_negatives_from, cfg.hard_negatives_hours, cfg.seed,
                               Path(cache_dir) if cache_dir else default_cache_dir(), progress)
