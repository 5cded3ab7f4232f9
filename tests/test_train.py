import dataclasses

import numpy as np
import pytest
import torch

from edgeosc.config import UNKNOWN, AugmentConfig, FeatureConfig, ModelConfig, TrainConfig
from edgeosc.checkpoint import CheckpointError, load_checkpoint
from edgeosc.evaluate import Batches, clip_logits, evaluate_checkpoint, keyword_free
from edgeosc.features import FeatureExtractor
from edgeosc.models.kws import build_model
from edgeosc.train import train

from conftest import tone_clipset

TRAIN = TrainConfig(epochs=3, batch_size=8, lr=3e-3, patience=10, augment=AugmentConfig(noise_prob=0.5))


def run(tones, data_cfg, out, attention="oscillator", dropout=0.1, **kw):
    return train(tones, out, model_cfg=ModelConfig(attention=attention, size="small", dropout=dropout),
                 feature_cfg=FeatureConfig(), train_cfg=kw.pop("train_cfg", TRAIN), data_cfg=data_cfg,
                 progress=False, **kw)


@pytest.mark.parametrize("mixup", [0.0, 0.4])
def test_resume_after_interruption_equals_uninterrupted_run(tones, data_cfg, tmp_path, mixup):
    cfg = dataclasses.replace(TRAIN, mixup=mixup)  # mixup's draws, too, follow (seed, epoch)
    full = run(tones, data_cfg, tmp_path / "full", train_cfg=cfg)
    assert run(tones, data_cfg, tmp_path / "cut", train_cfg=cfg, stop_after_epochs=1) == dict(interrupted=True, epochs=1)
    last = tmp_path / "cut" / "last.pt"
    raw = torch.load(last, weights_only=True)  # written before a setting existed (it runs at its default): resumes
    raw["train_config"] = {k: v for k, v in raw["train_config"].items() if k != "stream_loss"}
    torch.save(raw, last)
    with pytest.raises(CheckpointError, match="another model or training config"):
        run(tones, data_cfg, tmp_path / "cut", train_cfg=dataclasses.replace(cfg, lr=1e-3), resume=True)
    resumed = run(tones, data_cfg, tmp_path / "cut", train_cfg=cfg, resume=True)
    a, b = (torch.load(tmp_path / d / "last.pt", weights_only=True)["model"] for d in ("full", "cut"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert full["test_accuracy"] == resumed["test_accuracy"] and full["epochs"] == resumed["epochs"] == 3


@pytest.mark.parametrize("attention, mixup", [("oscillator", 0.0), ("softmax", 0.0), ("kuramoto", 0.0), ("ds-cnn", 0.0),
                                              ("oscillator", 0.4)])
def test_training_learns_and_writes_artifacts(tones, data_cfg, tmp_path, attention, mixup):
    # DS-CNN's batch norms (running statistics) need more of the few steps 18 tone clips give
    cfg = dataclasses.replace(TRAIN, epochs=16 if attention == "ds-cnn" else 8, lr=1e-2, mixup=mixup)
    res = run(tones, data_cfg, tmp_path, attention, train_cfg=cfg)
    assert res["best_val_accuracy"] > 0.6  # three tones are easy; chance is 1/3
    assert {"best.pt", "last.pt", "metrics.json", "results.json"} <= {p.name for p in tmp_path.iterdir()}
    assert len(res["test_confusion"]) == 3 and sum(map(sum, res["test_confusion"])) == res["test_n"] == 9
    again = evaluate_checkpoint(tmp_path / "best.pt", tones)
    assert again["accuracy"] == res["test_accuracy"]


def test_stream_clips_train_on_streams_and_need_a_streaming_model(tones, data_cfg, tmp_path):
    seen = []

    def build(model_cfg, batches, device):  # the model, its training inputs recorded
        model = build_model(model_cfg)
        model.register_forward_pre_hook(lambda m, args: seen.append((m.training, args[0].shape[1])))
        return model

    cfg, features = dataclasses.replace(TRAIN, epochs=1, stream_clips=2), FeatureConfig(normalize="running")
    streaming = ModelConfig(size="small", window=49)
    res = train(tones, tmp_path, model_cfg=streaming, feature_cfg=features, train_cfg=cfg, data_cfg=data_cfg,
                progress=False, build=build)
    # trained and validated on streams (two clips, then the clip), the same streams each epoch; tested on both
    assert set(seen) == {(True, 3 * features.n_frames), (False, 3 * features.n_frames)}
    assert 0 <= res["test_stream_accuracy"] <= 1 and "test_accuracy" in res
    raw = torch.load(tmp_path / "best.pt", weights_only=True)  # written while stream_context existed: still loads
    old = {k: v for k, v in raw["train_config"].items() if k != "stream_clips"}
    raw["train_config"] = {**old, "stream_context": 49}
    torch.save(raw, tmp_path / "old.pt")
    assert load_checkpoint(tmp_path / "old.pt").train_cfg.stream_clips == 0
    fx = FeatureExtractor(features)
    wave = torch.randn(2, 3 * features.clip_samples) * 0.1
    stream = fx.stream(wave)
    assert torch.allclose(stream[:, :features.n_frames], fx(wave[:, :features.clip_samples]), atol=1e-5)
    for end in (60, stream.shape[1] - 1):  # a frame's features are its window's last, as the listener gives them
        window = wave[:, (end + 1 - features.n_frames) * features.hop_length:][:, :features.clip_samples]
        assert torch.allclose(stream[:, end], fx(window)[:, -1], atol=1e-5)
    with pytest.raises(ValueError, match="streaming model"):
        run(tones, data_cfg, tmp_path / "whole", train_cfg=cfg)
    none = FeatureExtractor(dataclasses.replace(features, normalize="none"))  # no mean: a stream is its clips' frames
    assert torch.allclose(none.stream(wave)[:, features.n_frames:2 * features.n_frames],
                          none(wave[:, features.n_frames * features.hop_length:][:, :features.clip_samples]))
    with pytest.raises(ValueError, match="a stream can compute"):  # the clip's mean looks ahead
        train(tones, tmp_path / "utt", model_cfg=streaming, feature_cfg=FeatureConfig(), train_cfg=cfg,
              data_cfg=data_cfg, progress=False)
    with pytest.raises(ValueError, match="stream_clips"):
        TrainConfig(stream_clips=-1)


def test_streams_can_put_keyword_free_clips_before_each_clip(tones, data_cfg, tmp_path):
    with pytest.raises(ValueError, match="no keyword-free clips"):  # three tones, none of them _unknown_
        keyword_free(tones)
    data = dataclasses.replace(tones, classes=("tone0", "tone1", UNKNOWN))
    quiet = keyword_free(data)
    train_idx = data.indices("train")
    assert np.array_equal(data.audio[quiet], data.audio[train_idx[data.labels[train_idx] == 2]])
    features = FeatureConfig(normalize="running")
    fx = FeatureExtractor(features)
    one = quiet[:1].repeat(5)  # a single context clip: each stream is known
    batches = Batches(data, "val", fx, torch.device("cpu"), context=one)
    feats, labels = next(batches(4, None, None, stream_clips=1))  # the split in order
    val = data.indices("val")[:4]
    wave = torch.as_tensor(np.concatenate([data.audio[one[:4]], data.audio[val]], 1), dtype=torch.float32) / 32768
    assert torch.allclose(feats, fx.stream(wave)[:, -2 * features.n_frames:])
    assert torch.equal(labels, torch.as_tensor(data.labels[val]))
    cfg = dataclasses.replace(TRAIN, epochs=1, stream_clips=1, stream_after="keyword-free")
    res = train(data, tmp_path, model_cfg=ModelConfig(size="small", window=49), feature_cfg=features, train_cfg=cfg,
                data_cfg=data_cfg, progress=False)
    assert 0 <= res["test_stream_accuracy"] <= 1
    with pytest.raises(ValueError, match="stream_after"):
        TrainConfig(stream_after="speech")


def test_max_pooling_loss_reads_a_keywords_best_frame_and_a_keyword_free_clips_worst(tones, data_cfg, tmp_path):
    data = dataclasses.replace(tones, classes=("tone0", "tone1", UNKNOWN))
    features = FeatureConfig(normalize="running")
    batches = Batches(data, "val", FeatureExtractor(features), torch.device("cpu"))
    torch.manual_seed(0)
    model = build_model(ModelConfig(size="small", window=49, n_classes=3)).eval()
    feats, labels = next(batches(12, None, None, stream_clips=2))
    assert set(labels.tolist()) == {0, 1, 2}
    with torch.no_grad():
        frames = model(feats, per_frame=True)[:, -features.n_frames:]  # the clip's own frames
        picked = clip_logits(model, feats, labels, batches, "max")
        assert torch.equal(clip_logits(model, feats, labels, batches), model(feats))  # "last": the last frame's
    own = frames.log_softmax(-1)[torch.arange(len(labels)), :, labels]  # [clips, frames]
    for i, label in enumerate(labels.tolist()):
        best = own[i].argmax() if label < 2 else own[i].argmin()  # tone0, tone1 are keywords; _unknown_ is not
        assert torch.equal(picked[i], frames[i, best])
        assert own[i].max() > own[i].min()  # a choice was made: the frames differ
    cfg = dataclasses.replace(TRAIN, epochs=1, stream_clips=1, stream_after="keyword-free", stream_loss="max")
    res = train(data, tmp_path, model_cfg=ModelConfig(size="small", window=49), feature_cfg=features, train_cfg=cfg,
                data_cfg=data_cfg, progress=False)
    assert 0 <= res["test_stream_accuracy"] <= 1
    with pytest.raises(ValueError, match="needs stream_clips"):
        TrainConfig(stream_loss="max")
    with pytest.raises(ValueError, match="stream_loss must be one of"):
        TrainConfig(stream_clips=1, stream_loss="mean")


def test_mixup_alpha_must_not_be_negative():
    with pytest.raises(ValueError, match="mixup"):
        TrainConfig(mixup=-0.1)


def test_bad_checkpoints(tones, data_cfg, tmp_path):
    with pytest.raises(CheckpointError, match="no such"):
        load_checkpoint(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="junk.pt"):
        load_checkpoint(tmp_path / "junk.pt")
    run(tones, data_cfg, tmp_path / "r", train_cfg=dataclasses.replace(TRAIN, epochs=1))
    raw = torch.load(tmp_path / "r" / "best.pt", weights_only=True)
    raw["model_config"]["d_osc"] = 5  # weights of another model
    torch.save(raw, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="does not match"):
        load_checkpoint(tmp_path / "other.pt")
    raw = torch.load(tmp_path / "r" / "best.pt", weights_only=True)
    raw["model"]["head.weight"][0, 0] = float("nan")
    torch.save(raw, tmp_path / "nan.pt")
    with pytest.raises(CheckpointError, match="non-finite"):
        load_checkpoint(tmp_path / "nan.pt")
    with pytest.raises(CheckpointError, match="another model"):  # resume with a different model config
        train(tones, tmp_path / "r", model_cfg=ModelConfig(size="small", d_osc=4), feature_cfg=FeatureConfig(),
              train_cfg=TRAIN, data_cfg=data_cfg, resume=True, progress=False)


def test_init_from_copies_matching_weights_and_refuses_other_networks(tones, data_cfg, tmp_path):
    run(tones, data_cfg, tmp_path / "src", train_cfg=dataclasses.replace(TRAIN, epochs=1))
    src = load_checkpoint(tmp_path / "src" / "best.pt").model.state_dict()
    two = tone_clipset(classes=2)  # another class set: the classifier cannot be copied
    cfg = dataclasses.replace(TRAIN, epochs=1, lr=1e-12, init_from=str(tmp_path / "src" / "best.pt"))
    run(two, data_cfg, tmp_path / "dst", train_cfg=cfg, dropout=0.3)  # another dropout rate, the same tensors
    dst = torch.load(tmp_path / "dst" / "last.pt", weights_only=True)["model"]
    assert torch.allclose(dst["stem.weight"], src["stem.weight"], atol=1e-6)  # copied (lr ~ 0)
    assert dst["head.weight"].shape[0] == 2
    with pytest.raises(CheckpointError, match="same network"):
        run(tones, data_cfg, tmp_path / "soft", "softmax", train_cfg=cfg)


def test_distillation_matches_the_teachers_posteriors_and_refuses_another_task(tones, data_cfg, tmp_path):
    """A student distilled at weight 1 from a DS-CNN (its own MFCC features, from the same augmented clips) learns the
    teacher's mapping, not the labels: a teacher trained with the classes rotated makes a student that names every
    tone as the teacher does. A teacher of other classes, or a bad weight or temperature, is refused by name."""
    from edgeosc.config import MLPERF_FEATURES
    from edgeosc.data.clipset import ClipSet
    rotated = ClipSet(tones.audio, (tones.labels + 1) % 3, tones.groups, tones.split, tones.classes)
    train(rotated, tmp_path / "teacher", model_cfg=ModelConfig(attention="ds-cnn", size="small"),
          feature_cfg=MLPERF_FEATURES, train_cfg=dataclasses.replace(TRAIN, epochs=16, lr=1e-2), data_cfg=data_cfg,
          progress=False)
    teacher = evaluate_checkpoint(tmp_path / "teacher" / "best.pt", rotated)["accuracy"]
    cfg = dataclasses.replace(TRAIN, epochs=8, lr=1e-2, distill_from=str(tmp_path / "teacher" / "best.pt"),
                              distill_weight=1.0, mixup=0.4)
    run(tones, data_cfg, tmp_path / "student", train_cfg=cfg)
    student = load_checkpoint(tmp_path / "student" / "best.pt")
    assert teacher > 0.6 and evaluate_checkpoint(tmp_path / "student" / "last.pt", rotated)["accuracy"] > 0.6
    assert student.train_cfg.distill_from == cfg.distill_from
    with pytest.raises(CheckpointError, match="same classes"):
        run(tone_clipset(classes=4), data_cfg, tmp_path / "other", train_cfg=cfg)
    with pytest.raises(ValueError, match="distill_weight"):
        dataclasses.replace(TRAIN, distill_weight=1.5)
    with pytest.raises(ValueError, match="distill_temperature"):
        dataclasses.replace(TRAIN, distill_temperature=0.0)
