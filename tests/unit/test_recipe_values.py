"""Each large-batch recipe's --print-config document against the values its source states
(mlcommons/training lars_util.py and README_tensorflow2.md; libffcv/ffcv-imagenet rn50_configs and
train_imagenet.py; Goyal et al. 2017), at the published global batch and at others."""
import pytest

from imagenet import recipes
from imagenet.train import schedules
from imagenet.config import choices, parse_command
from launch import environment


def _printed(argv, processes=1):
    environ = {} if processes == 1 else {"RANK": "0", "WORLD_SIZE": str(processes), "LOCAL_RANK": "0",
                                         "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    command = parse_command([*argv, "--print-config", "/no/such/path"], "ddp", launcher=environment.detect(environ))
    assert command.print_config
    return command.settings.to_dict()  # what --print-config prints


@pytest.mark.parametrize("processes,lr,warmup", [(16, 10.0, 5.0), (64, 10.0, 5.0), (128, 25.0, 5.0),
                                                 (256, 31.2, 25.0)])
def test_mlperf_lr_and_warmup_follow_the_global_batch_as_lars_util(processes, lr, warmup):
    doc = _printed(["-a", "resnet50", "-b", "208", "--recipe", "mlperf"], processes)
    optim = doc["optim"]
    assert doc["batch"]["global_batch"] == 208 * processes
    assert (optim["lr"], optim["lr_scaling"]) == (lr, "none")
    assert (optim["warmup_epochs"], optim["lr_warmup_decay"]) == (warmup, 0.0)
    assert (optim["opt"], optim["lars_coefficient"], optim["momentum"]) == ("lars", 0.001, 0.9)
    assert (optim["lr_schedule"], optim["lr_power"], optim["lr_end"]) == ("poly", 2.0, 1e-4)
    assert (optim["weight_decay"], optim["label_smoothing"], optim["epochs"]) == (2e-4, 0.1, 42)


@pytest.mark.parametrize("epochs,start,end,top1", recipes.FFCV_RUNS)
def test_ffcv_recipes_as_their_configs(epochs, start, end, top1):
    name = f"ffcv-{epochs}"
    doc = _printed(["-a", "resnet50", "-b", "512", "--recipe", name], processes=8)
    optim, data = doc["optim"], doc["data"]
    assert doc["batch"]["global_batch"] == 4096
    assert optim["lr"] * 4096 / 256 == pytest.approx(1.7)  # lr 1.7 at 8 x 512
    assert (optim["opt"], optim["lr_schedule"], optim["lr_peak_epoch"], optim["epochs"]) == ("sgd", "ramp", 2.0, epochs)
    assert (optim["momentum"], optim["weight_decay"], optim["label_smoothing"], optim["no_bn_wd"]) == (0.9, 1e-4, 0.1,
                                                                                                    True)
    assert (data["min_res"], data["max_res"], data["start_ramp"], data["end_ramp"]) == (160, 192, start, end)
    assert (data["val_crop_size"], data["val_resize_size"]) == (256, 293)
    recipe = recipes.RECIPES[name]
    assert (recipe.top1, recipe.epochs, recipe.published_batch) == (top1, epochs, 4096)
    assert f"rn50_{epochs}_epochs.yaml" in recipe.source


def test_goyal_zero_initialises_the_residual_blocks():
    assert _printed(["--recipe", "goyal"])["model"]["zero_init_residual"] is True


def test_new_flags_use_torchvisions_names_beside_the_old_ones():
    doc = _printed(["--lr-scheduler", "cosine", "--lr-warmup-epochs", "2", "--train-crop-size", "176",
                    "--val-resize-size", "232", "--val-crop-size", "224", "--model-ema", "--model-ema-steps", "32",
                    "--model-ema-decay", "0.99998", "--mixup-alpha", "0.2", "--cutmix-alpha", "1.0",
                    "--norm-weight-decay", "0", "--opt", "lamb", "--lr-warmup-decay", "0.01"])
    assert doc["optim"]["lr_schedule"] == "cosine" and doc["optim"]["warmup_epochs"] == 2.0
    assert doc["data"]["image_size"] == 176 and doc["data"]["val_resize_size"] == 232
    assert doc["model"]["model_ema"] and doc["optim"]["opt"] == "lamb"
    assert _printed(["--lr-schedule", "poly"])["optim"]["lr_schedule"] == "poly"  # today's name stays


def test_accumulation_multiplies_the_global_batch():
    doc = _printed(["-b", "64", "--accum-steps", "4"], processes=8)
    assert doc["batch"]["global_batch"] == 64 * 8 * 4 and doc["batch"]["accum_steps"] == 4


BAD = [(["--min-res", "192", "--max-res", "160"], "--min-res 192 / --max-res 160"),
       (["--min-res", "160"], "both --min-res and --max-res"),
       (["--min-res", "160", "--max-res", "192", "--data-backend", "dali"], "dali backend fixes its resize size"),
       (["--accum-steps", "0"], "--accum-steps must be at least 1"),
       (["--accum-steps", "2", "--amp-backend", "apex"], "Apex would unscale"),
       (["--lr-scheduler", "ramp", "--lr-peak-epoch", "95"], "--lr-peak-epoch 95"),
       (["--lr-warmup-decay", "2"], "--lr-warmup-decay is a start factor"),
       (["--zero-init-residual", "-a", "vgg11"], "needs a residual network"),
       (["--model-ema-decay", "1.5"], "--model-ema-decay 1.5"),
       (["--mixup-alpha", "-1"], "--mixup-alpha -1")]


@pytest.mark.parametrize("argv,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_component_settings_fail_in_one_line(argv, message):
    from imagenet.config import ConfigError

    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as caught:
        parse_command([*argv, "/no/such/path"], "ddp", check_data=False, launcher=environment.detect({}))
    assert "\n" not in str(caught.value)


def test_schedule_and_optimizer_choices_match_the_engine():
    assert choices.LR_SCHEDULES == schedules.KINDS
    assert set(choices.OPTIMIZERS) == {"sgd", "lars", "lamb"}
