"""Keyword-free audio for always-on false alarms (data/negatives.py) and the DET protocol on it (stream_eval.py)."""
import json

import numpy as np
import pytest

from edgeosc import mining as M
from edgeosc.data import negatives as N
from edgeosc.stream import Listener
from edgeosc.stream_eval import DET_THRESHOLDS, evaluate_stream, format_result, plot_det

from test_stream import SR, TONE_HZ, band_model, noise
from test_stream_eval import tone_set


def test_no_sentence_says_a_class_word_or_a_training_unknown_word():
    said = {w for s in N.SENTENCES for w in N._words(s)}
    assert said and not said & N.forbidden_words()
    assert {"yes", "stop", "seven", "marvin"} <= N.forbidden_words()


def test_negatives_are_reproducible_varied_and_never_digitally_silent(tmp_path):
    x = N.make_negatives(60 / 3600, seed=3)
    assert x.dtype == np.float32 and len(x) == 60 * SR and np.abs(x).max() <= 1
    assert np.array_equal(x, N.make_negatives(60 / 3600, seed=3))
    assert not np.array_equal(x[:SR], N.make_negatives(60 / 3600, seed=4)[:SR])
    rms_db = 20 * np.log10(np.sqrt(np.mean(x[: len(x) // 1600 * 1600].reshape(-1, 1600) ** 2, 1)))  # 0.1 s frames
    assert rms_db.min() > -85 and rms_db.max() - rms_db.min() > 20  # a room's floor at least, and varied levels
    cached = N.load_negatives(60 / 3600, 3, tmp_path)
    assert np.abs(cached - x).max() <= 1 / 32767 and list((tmp_path / "negatives").iterdir())
    assert np.array_equal(N.load_negatives(60 / 3600, 3, tmp_path), cached)  # read back from the cache
    with pytest.raises(ValueError, match="hours > 0"):
        N.make_negatives(0)


def test_det_points_equal_runs_at_their_threshold_and_recall_is_read_at_fixed_rates(tmp_path):
    """One pass over the negatives scores every threshold: each DET point's false alarms are those of a listener run
    at that threshold; the recall at a rate is the best recall among points at or under it."""
    model, data = band_model(), tone_set()
    t = np.arange(int(0.3 * SR)) / SR  # keyword-free audio that still fires: "low" tone bursts in noise, none keyed
    negatives = noise(60.0, seed=5)
    for onset in np.arange(2.0, 58.0, 4.0):
        s = int(onset * SR)
        negatives[s:s + len(t)] += 0.3 * np.sin(2 * np.pi * TONE_HZ["low"] * t)
    negatives = negatives.astype(np.float32)
    r = evaluate_stream(model, data, hop_ms=100, threshold=0.5, smooth=1, seed=2, negatives=negatives)
    assert [d["threshold"] for d in r["det"]] == list(DET_THRESHOLDS)
    for d in r["det"][::5]:
        lis = Listener(model, 100, d["threshold"], 1)
        lis.push(negatives)
        lis.flush()
        assert d["false_alarms"] == len(lis.detections) > 0
        assert d["false_alarms_per_hour"] == pytest.approx(d["false_alarms"] * 60)
    for target, best in r["recall_at"].items():
        ok = [d["recall"] for d in r["det"] if d["false_alarms_per_hour"] <= int(target)]
        assert (best is None) == (not ok) and (best is None or best["recall"] == max(ok))
    assert r["negatives"]["hours"] == pytest.approx(1 / 60) and "recall at 1 false alarm per hour" in format_result(r)
    assert plot_det(r, tmp_path / "det.png").stat().st_size > 1000
    # other smoothing lengths from the same pass: smooth 1 is the run above; 2 halves one-hop bursts' posteriors
    by = evaluate_stream(model, data, hop_ms=100, threshold=0.5, smooth=1, seed=2, negatives=negatives,
                         smooths=(1, 2), trace_out=tmp_path / "trace.npz")
    assert by["by_smooth"]["1"]["det"] == r["det"] and by["by_smooth"]["2"]["det"] != r["det"]
    assert "smoothed over   2 hops" in format_result(by) and plot_det(by, tmp_path / "det2.png").exists()
    saved = np.load(tmp_path / "trace.npz")  # the pass, to replay: its hops' posteriors, the events, the settings
    meta = json.loads(str(saved["meta"]))
    assert saved["posteriors"].shape == (len(saved["samples"]), len(model.classes)) == (by["per_hop"]["hops"], 4)
    assert np.allclose(saved["posteriors"].sum(1), 1) and saved["negative_posteriors"].shape[1] == 4
    assert len(meta["events"]) == by["events"] and meta["hop"] == 1600 and meta["classes"] == list(model.classes)


def test_the_training_pool_shares_no_sentence_with_the_evaluation_and_says_no_class_word():
    train = {w for s in N.TRAINING_SENTENCES for w in N._words(s)}
    assert train and not train & N.forbidden_words() and not set(N.TRAINING_SENTENCES) & set(N.SENTENCES)
    a, b = N.make_negatives(8 / 3600, seed=0), N.make_negatives(8 / 3600, seed=0, pool="train")
    assert a.shape == b.shape and not np.array_equal(a, b)
    with pytest.raises(ValueError, match="unknown negatives pool"):
        N.make_negatives(1 / 3600, pool="test")


def test_training_negatives_join_the_training_split_as_unknown(tmp_path):
    from edgeosc.config import SILENCE, UNKNOWN
    from edgeosc.data import ClipSet
    classes = (SILENCE, UNKNOWN, "yes")
    data = ClipSet(np.zeros((3, SR), np.int16), np.arange(3), np.array(["a", "b", "c"]),
                   np.array(["train", "val", "test"]), classes)
    more = N.with_training_negatives(data, 5 / 3600, seed=1, cache_dir=tmp_path, progress=False)
    new = slice(3, None)
    assert len(more.audio) == 8 and (more.labels[new] == 1).all() and (more.split[new] == "train").all()
    assert np.abs(more.audio[new]).max() > 0 and more.meta["negatives"]["clips"] == 5
    assert (tmp_path / "negatives" / "v1-0.00138889h-seed1-train.npy").is_file()
    digits = N.with_training_negatives(ClipSet(data.audio, data.labels, data.groups, data.split, ("x", "y", "z")),
                                       5 / 3600, 1, tmp_path, False)  # a task without one (FSDD) gets _unknown_
    assert digits.classes == ("x", "y", "z", UNKNOWN) and (digits.labels[new] == 3).all()
    assert N.with_unknown_class(more) is more


def test_mining_keeps_the_strongest_windows_apart():
    scores = np.array([0.05, 0.3, 0.9, 0.4, 0.2, 0.0, 0.6, 0.7, 0.1, 0.95])
    assert M.strongest_apart(scores, 0.1, 1) == [9, 2, 7, 4]  # 3 and 1 sit beside 2, 6 beside 7, 8 beside 9
    assert M.strongest_apart(scores, 0.5, 0) == [9, 2, 7, 6] and M.strongest_apart(scores, 0.99, 2) == []


def test_a_task_mined_for_negatives_has_the_unknown_class_wherever_it_is_loaded(tmp_path, monkeypatch):
    """FSDD's digits and --mine-negatives alone: training adds _unknown_ for the mined windows, so every reader of the
    data config (eval, stream-eval) must see the same classes."""
    import edgeosc.data as D
    from edgeosc.config import UNKNOWN, DataConfig
    from edgeosc.data import ClipSet
    digits = ClipSet(np.zeros((3, SR), np.int16), np.arange(3), np.array(list("abc")),
                     np.array(["train", "val", "test"]), ("x", "y", "z"))
    monkeypatch.setattr(D, "_load", lambda cfg, cache_dir, progress: digits)
    assert D.load_dataset(DataConfig(), tmp_path).classes == ("x", "y", "z")
    mined = D.load_dataset(DataConfig(hard_negatives_hours=1.0, hard_negatives_from="run/best.pt"), tmp_path)
    assert mined.classes == ("x", "y", "z", UNKNOWN) and len(mined.audio) == 3  # the windows come with training


def test_the_protocol_reads_a_detectors_splits_without_its_training_audio(tmp_path, monkeypatch):
    """stream_eval.protocol_data: a model trained with keyword-free audio is scored on its data set's splits alone,
    with the _unknown_ class that audio gave it."""
    import edgeosc.data as D
    from edgeosc.config import UNKNOWN, DataConfig
    from edgeosc.data import ClipSet
    from edgeosc.stream_eval import protocol_data
    digits = ClipSet(np.zeros((3, SR), np.int16), np.arange(3), np.array(list("abc")),
                     np.array(["train", "val", "test"]), ("x", "y", "z"))
    monkeypatch.setattr(D, "_load", lambda cfg, cache_dir, progress: digits)
    data = protocol_data(DataConfig(negatives_hours=0.5), tmp_path)
    assert data.classes == ("x", "y", "z", UNKNOWN) and len(data.audio) == 3
    assert protocol_data(DataConfig(), tmp_path).classes == ("x", "y", "z")


def test_hard_negatives_are_the_windows_a_model_calls_keywords(tmp_path):
    """A model that calls everything "yes" is wrong on every window: one is mined per 0.5 s and they join the
    training split as _unknown_; one that calls everything _unknown_ yields none. Cached by the checkpoint."""
    import torch

    from edgeosc.config import SILENCE, UNKNOWN, DataConfig, FeatureConfig, ModelConfig, TrainConfig
    from edgeosc.data import ClipSet
    from edgeosc.train import train
    classes = (SILENCE, UNKNOWN, "yes")
    data = ClipSet(np.zeros((6, SR), np.int16), np.arange(6) % 3, np.array(list("abcdef")),
                   np.array(["train", "train", "train", "val", "val", "test"]), classes)
    hours = 4 / 3600  # 4 s of the training pool: windows start every 50 ms up to 3 s

    def saying(says):  # a network that says `says` whatever it hears
        def build(cfg, batches, device):
            from edgeosc.models.kws import build_model
            net = build_model(cfg)
            with torch.no_grad():
                net.head.weight.zero_()
                net.head.bias.copy_(torch.tensor([0.0, 0.0, 0.0]).index_fill(0, torch.tensor(classes.index(says)), 9))
            return net
        return build

    def make(run, says, data_cfg=DataConfig()):
        train(data, run, model_cfg=ModelConfig(), feature_cfg=FeatureConfig(), train_cfg=TrainConfig(epochs=0),
              data_cfg=data_cfg, progress=False, build=saying(says))

    for says in ("yes", UNKNOWN):
        run = tmp_path / says.strip("_")
        make(run, says)
        more = M.with_hard_negatives(data, run / "best.pt", hours, seed=0, cache_dir=tmp_path, progress=False)
        mined = more.meta["hard_negatives"]["clips"]
        assert mined == (7 if says == "yes" else 0) and len(more.audio) == 6 + mined
        assert (more.labels[6:] == 1).all() and (more.split[6:] == "train").all()
        assert (more.groups[6:] == "hard-negatives").all()
    pool = N.load_negatives(hours, 0, tmp_path, pool="train")
    starts = [i * SR // 2 for i in range(7)]  # every tenth 50 ms window: all score the same, the first is kept
    yes = M.with_hard_negatives(data, tmp_path / "yes" / "best.pt", hours, 0, tmp_path, False)
    assert sorted(map(bytes, yes.audio[6:])) == sorted(bytes(np.round(pool[s:s + SR] * 32767).astype(np.int16))
                                                        for s in starts)
    assert len(list((tmp_path / "hard-negatives").glob("*.npz"))) == 2
    # a second round: a model trained on "yes"'s windows passes them on beside its own (rounds accumulate)
    first = tmp_path / "yes" / "best.pt"
    make(tmp_path / "again", "yes", DataConfig(hard_negatives_hours=hours, hard_negatives_from=str(first)))
    again = M.with_hard_negatives(data, tmp_path / "again" / "best.pt", hours, 0, tmp_path, False)
    assert len(again.audio) == 6 + 7 + 7 and [r["clips"] for r in again.meta["hard_negative_rounds"]] == [7, 7]
    assert sorted(map(bytes, again.audio[6:13])) == sorted(map(bytes, yes.audio[6:]))
    first.rename(first.with_suffix(".gone"))
    with pytest.raises(ValueError, match="missing"):
        M.with_hard_negatives(data, tmp_path / "again" / "best.pt", hours, 0, tmp_path, False)
    first.with_suffix(".gone").rename(first)
    with pytest.raises(ValueError, match="classes"):
        M.with_hard_negatives(ClipSet(data.audio, data.labels, data.groups, data.split, ("x", "y", "z")),
                              tmp_path / "yes" / "best.pt", hours, 0, tmp_path, False)


def test_a_streaming_model_is_mined_as_the_stream_hears_it():
    """stream_scores runs the pool in chunks, each after the frames its first frame still sees: every frame's score
    is the one-pass stream's, from the first frame with a whole window behind it."""
    import torch

    from edgeosc.config import FeatureConfig, ModelConfig
    from edgeosc.features import FeatureExtractor
    from edgeosc.models.kws import build_model
    torch.manual_seed(0)
    features = FeatureExtractor(FeatureConfig(normalize="running"))
    for attention in ("oscillator", "softmax"):
        model = build_model(ModelConfig(attention=attention, window=49, n_classes=4)).eval()
        x = torch.from_numpy(noise(9.0, seed=3).astype(np.float32))
        with torch.no_grad():
            scores, starts, hop = M.stream_scores(model, features, x, [2, 3], chunk_s=1.3, progress=False)
            whole = model(features.stream(x[None]), per_frame=True)[0].softmax(-1)[:, 2:].amax(-1).numpy()
        # frame 48 is the first with 49 frames (a clip's) behind it; its window starts at sample 0
        assert hop == 320 and starts[0] == 0 and starts[-1] + SR <= len(x) and len(scores) == len(starts)
        assert np.allclose(scores, whole[48:48 + len(scores)], atol=1e-5) and np.all(np.diff(starts) == hop)
