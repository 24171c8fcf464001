"""torchvision's reference command line as written, the augmentation policies against torchvision's own
draws, repeated augmentation, and the training extras the new recipes need (schedules, BCE, stochastic
depth, gradient clipping, bias decay, --weights).

The policies are torchvision's v2 classes; what is ours is where their random draws come from (the
per-sample seeded stream of the loader) and what runs before them (the fast backend's crop). So the tests
check that (1) an image through the fast backend with a policy equals torchvision's policy applied to the
same crop with the same stream, and (2) over many per-sample seeds each operation is chosen as often as
torchvision's uniform choice says, within a chi-square bound.
"""
import functools
import io
import json
import math
from collections import Counter

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.data.decode import augment, fast, pil
from hpc_imagenet.imagenet.data.decode.augment import Augmentation
from hpc_imagenet.imagenet.data.samplers import RepeatedAugmentationSampler, sample_seeds
from hpc_imagenet.imagenet.model import network, precision
from hpc_imagenet.imagenet.train import losses, optim, schedules
from tests.helpers import TORCHVISION_COMMAND, child_env, photo, script
from tests.warm_start import warm_python

def _torchrun_env(world: int) -> dict:
    return {"RANK": "0", "WORLD_SIZE": str(world), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": str(min(world, 8)),
            "GROUP_RANK": "0", "MASTER_ADDR": "node0", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "job"}


@pytest.mark.parametrize("world,global_batch", [(2, 256), (8, 1024)])
def test_torchvision_command_print_config_holds_its_values(world, global_batch):
    proc = warm_python(script("imagenet_ddp.py"), *TORCHVISION_COMMAND, "--data-path", "/no/such/path",
                       "--print-config", env=child_env(**_torchrun_env(world)))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    data, optim_, model = doc["data"], doc["optim"], doc["model"]
    assert doc["batch"]["global_batch"] == global_batch and optim_["batch_size"] == 128
    assert data["root"] == "/no/such/path" and model["arch"] == "resnet50" and model["model_ema"]
    assert (optim_["lr"], optim_["lr_scaling"], optim_["lr_schedule"]) == (0.5, "none", "cosine")
    assert (optim_["warmup_epochs"], optim_["lr_warmup_method"], optim_["lr_warmup_decay"]) == (5.0, "linear", 0.01)
    assert (optim_["weight_decay"], optim_["norm_weight_decay"], optim_["label_smoothing"]) == (2e-5, 0.0, 0.1)
    assert (data["auto_augment"], data["random_erase"], data["image_size"], data["val_resize_size"]) == (
        "ta_wide", 0.1, 176, 232)
    assert (data["mixup_alpha"], data["cutmix_alpha"], data["ra_sampler"], data["ra_reps"]) == (0.2, 1.0, True, 4)


def test_the_engine_spelling_keeps_the_engine_reading_of_lr():
    settings = config.parse(["--dummy", "-a", "resnet50", "--lr", "0.1", "--lr-scheduler", "cosine"], environ={})
    assert settings.optim.lr_scaling == "linear" and settings.optim.lr_warmup_decay is None


@pytest.mark.parametrize("flag", ["--cache-dataset", "--device cuda", "--backend pil", "--use-v2",
                                  "--transformer-embedding-decay 0"])
def test_torchvision_flags_with_no_meaning_here_are_refused_in_one_line(flag):
    with pytest.raises(config.ConfigError, match=rf"^{flag.split()[0]} is torchvision's and has no meaning here: "):
        config.parse(["--dummy", *flag.split()], environ={})


def test_steplr_step_size_and_gamma_place_the_drops():
    settings = config.parse(["--dummy", "--lr-scheduler", "steplr", "--lr-step-size", "30", "--lr-gamma", "0.5",
                             "--epochs", "100", "--amp", "--test-only", "--output-dir", "/tmp/x"], environ={})
    assert settings.optim.lr_schedule == "step" and settings.optim.lr_steps == (30, 60, 90)
    assert settings.precision.opt_level == "O1" and settings.run.evaluate and settings.logging.log_dir == "/tmp/x"
    plan = optim.schedule(settings.optim, 0.0, 1.0)
    assert [schedules.lr_factor(e * 10, 10, plan) for e in (29, 30, 60, 95)] == [1.0, 0.5, 0.25, 0.125]
    with pytest.raises(config.ConfigError, match="--lr-step-size and --lr-steps"):
        config.parse(["--dummy", "--lr-step-size", "30", "--lr-steps", "10"], environ={})


def test_exponential_constant_warmup_and_cosine_floor():
    exp = schedules.Schedule("exponential", epochs=10, gamma=0.9, warmup_epochs=2, warmup_start=0.1,
                             warmup_method="constant")
    assert [round(schedules.lr_factor(e * 4, 4, exp), 6) for e in (0, 1, 2, 3, 5)] == [0.1, 0.1, 1.0, 0.9, 0.729]
    cosine = schedules.Schedule("cosine", epochs=10, cosine_end=0.01)
    assert schedules.lr_factor(0, 4, cosine) == 1.0 and schedules.lr_factor(40, 4, cosine) == pytest.approx(0.01)


# ---------------------------------------------------------------- the policies against torchvision

@pytest.fixture(scope="module")
def jpeg_bytes():
    out = io.BytesIO()
    Image.fromarray(photo(120, 160, seed=3)).save(out, "JPEG", quality=90)
    return out.getvalue()


def _seeded(seed, call):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return call()


BILINEAR = v2.InterpolationMode.BILINEAR  # torchvision's train.py passes its --interpolation, bilinear by default


@pytest.mark.parametrize("policy,reference", [
    ("ta_wide", lambda: v2.TrivialAugmentWide(interpolation=BILINEAR)),
    ("ra", lambda: v2.RandAugment(magnitude=9, interpolation=BILINEAR)),
    ("imagenet", lambda: v2.AutoAugment(v2.AutoAugmentPolicy.IMAGENET, interpolation=BILINEAR)),
    ("augmix", lambda: v2.AugMix(severity=3, interpolation=BILINEAR))])
def test_fast_backend_policy_equals_torchvisions_on_the_same_crop(jpeg_bytes, policy, reference):
    ours = fast.FastTrain(48, augment=Augmentation(policy=policy, erase=0.5))
    plain = fast.FastTrain(48)
    theirs = v2.Compose([reference(), v2.RandomErasing(p=0.5, value=augment.MEAN_PIXEL)])
    for seed in range(12):
        expected = _seeded(seed, lambda: theirs(plain(jpeg_bytes)))  # the crop's draws, then the policy's
        assert torch.equal(_seeded(seed, lambda: ours(jpeg_bytes)), expected)


def _chosen_ops(op: v2.Transform, seeds, monkeypatch) -> Counter:
    """Which operation the policy picks for each per-sample seed (torchvision's own choice, recorded)."""
    picked = Counter()
    original = type(op)._apply_image_or_video_transform

    def record(self, image, transform_id, magnitude, **kwargs):
        picked[transform_id] += 1
        return original(self, image, transform_id, magnitude, **kwargs)

    monkeypatch.setattr(type(op), "_apply_image_or_video_transform", record)
    image = torch.randint(0, 256, (3, 16, 16), dtype=torch.uint8)
    for seed in seeds:
        _seeded(int(seed), lambda: op(image))
    return picked


def test_trivial_augment_picks_each_operation_uniformly_from_per_sample_seeds(monkeypatch):
    """2,800 samples of one epoch's seeds; 14 operations, each 1/14: chi-square with 13 degrees of freedom
    below 34.5 (its 0.1 % tail), so a correlated seeding would fail and a fair one passes 999 times in 1,000."""
    op = augment.policy(Augmentation(policy="ta_wide"))
    counts = _chosen_ops(op, sample_seeds(7, 0, 2800), monkeypatch)
    expected = 2800 / len(op._AUGMENTATION_SPACE)
    chi2 = sum((counts.get(name, 0) - expected) ** 2 / expected for name in op._AUGMENTATION_SPACE)
    assert len(op._AUGMENTATION_SPACE) == 14 and chi2 < 34.5, counts


def test_randaugment_magnitude_spread_is_a_clipped_normal():
    op = augment.SpreadRandAugment(21, 1.5, num_ops=0)
    image = torch.zeros(3, 8, 8, dtype=torch.uint8)
    drawn = []
    for seed in sample_seeds(1, 0, 4000):
        _seeded(int(seed), lambda: op(image))
        drawn.append(op.magnitude)
    drawn = np.array(drawn)
    # mean 21 within 4 standard errors (1.5 / sqrt(4000) ~ 0.024); rounding adds 1/12 to the variance
    assert abs(drawn.mean() - 21) < 0.1 and abs(drawn.std() - math.sqrt(1.5 ** 2 + 1 / 12)) < 0.1
    assert drawn.min() >= 0 and drawn.max() <= 30


def test_pil_and_baseline_backends_apply_the_policy(jpeg_bytes):
    aug = Augmentation(policy="ta_wide", erase=1.0)
    for make in (pil.pil_backend, pil.baseline_backend):
        plain, augmented = make(True, 32), make(True, 32, augment=aug)
        outs = [(_seeded(s, functools.partial(plain, jpeg_bytes)), _seeded(s, functools.partial(augmented, jpeg_bytes)))
                for s in range(4)]
        assert all(a.shape == b.shape and not torch.equal(a, b) for a, b in outs)  # erasing always changes it


# ---------------------------------------------------------------- repeated augmentation

def test_repeated_augmentation_deals_copies_to_different_ranks_with_their_own_seeds():
    length, world, reps = 40, 4, 4
    ranks = [RepeatedAugmentationSampler(range(length), num_replicas=world, rank=r, seed=3, seeded=True,
                                         repetitions=reps) for r in range(world)]
    for sampler in ranks:
        sampler.set_epoch(2)
    items = [list(sampler) for sampler in ranks]
    assert all(len(rank_items) == length // world == len(ranks[0]) for rank_items in items)
    by_index = {}
    for rank, rank_items in enumerate(items):
        for index, seed in rank_items:
            by_index.setdefault(index, []).append((rank, seed))
    # with as many ranks as repetitions each image read this epoch is on every rank once, each with its seed
    assert all(sorted(r for r, _ in copies) == list(range(world)) and len({s for _, s in copies}) == world
               for copies in by_index.values())
    resumed = ranks[1]
    resumed.set_epoch(2)
    resumed.set_start(3)
    assert list(resumed) == items[1][3:]  # a mid-epoch resume reads the rest, seeds included


# ---------------------------------------------------------------- the training extras

def test_bce_loss_one_hot_smoothing_and_threshold():
    logits, target = torch.tensor([[2.0, -1.0, 0.5]]), torch.tensor([0])
    dense = torch.tensor([[1.0, 0.0, 0.0]])
    assert losses.BinaryCrossEntropy()(logits, target) == pytest.approx(
        torch.nn.functional.binary_cross_entropy_with_logits(logits, dense).item())
    smoothed = torch.tensor([[0.9 + 0.1 / 3, 0.1 / 3, 0.1 / 3]])
    assert losses.BinaryCrossEntropy(0.1)(logits, target) == pytest.approx(
        torch.nn.functional.binary_cross_entropy_with_logits(logits, smoothed).item())
    mixed = torch.tensor([[0.7, 0.3, 0.0]])  # Mixup's soft target: 0.3 > 0.2 counts as present
    assert losses.BinaryCrossEntropy(thresh=0.2)(logits, mixed) == pytest.approx(
        torch.nn.functional.binary_cross_entropy_with_logits(logits, torch.tensor([[1.0, 1.0, 0.0]])).item())


def test_stochastic_depth_drops_branches_in_training_only_and_keeps_torchvisions_names():
    torch.manual_seed(0)
    plain = network.build("resnet18", 10)
    dropped = network.build("resnet18", 10, drop_path_rate=0.5)
    dropped.load_state_dict(plain.state_dict())  # the same names: checkpoints and weights load as they are
    x = torch.randn(2, 3, 32, 32)
    plain.eval(), dropped.eval()
    assert torch.equal(plain(x), dropped(x))
    dropped.train()
    outs = [_seeded(s, lambda: dropped(x)) for s in range(3)]
    assert not torch.equal(outs[0], outs[1]) or not torch.equal(outs[1], outs[2])


def test_clip_grad_norm_bounds_the_global_norm_before_the_step():
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    model(torch.randn(8, 4)).pow(2).sum().mul(100).backward()
    precision.clip_gradients(opt, 0.5)
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert norm == pytest.approx(0.5, rel=1e-4)


def test_bias_weight_decay_and_the_torchvision_optimizers():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    groups = optim.param_groups(model, 1e-4, no_bn_wd=False, norm_weight_decay=0.0, bias_weight_decay=0.5)
    decay_of = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    assert [decay_of[id(p)] for p in (model[0].weight, model[0].bias, model[1].weight)] == [1e-4, 0.5, 0.0]
    for name, kind in (("sgd_nesterov", torch.optim.SGD), ("rmsprop", torch.optim.RMSprop),
                       ("adamw", torch.optim.AdamW)):
        built = optim.build_optimizer(model, config.parse(["--dummy", "--opt", name], environ={}).optim, 0.1)
        assert isinstance(built, kind) and (name != "sgd_nesterov" or built.defaults["nesterov"])


def test_weights_by_enum_name_and_their_refusals():
    assert str(network._pretrained_weights("resnet50", "IMAGENET1K_V2")) == "ResNet50_Weights.IMAGENET1K_V2"
    with pytest.raises(network.ModelError, match="weights of another model than -a resnet50"):
        network._pretrained_weights("resnet50", "ResNet18_Weights.IMAGENET1K_V1")
    with pytest.raises(config.ConfigError, match="--weights .* and --pretrained both"):
        config.parse(["--dummy", "--weights", "IMAGENET1K_V2", "--pretrained"], environ={})


@pytest.mark.parametrize("flags,message", [
    ("--data-backend dali --auto-augment augmix", "DALI has no such policy"),
    ("--random-erase 1.5", "--random-erase is a probability"),
    ("--drop-path-rate 0.1 -a vgg11", "--drop-path-rate drops residual branches"),
    ("--bce-target-thresh 0.2", "--bce-target-thresh 0.2 binarises"),
    ("--ra-magnitude 31", "--ra-magnitude 31 is a bin of 0-30"),
])
def test_bad_augmentation_and_training_settings_are_one_line(flags, message):
    with pytest.raises(config.ConfigError, match=message):
        config.parse(["--dummy", *flags.split()], environ={})
