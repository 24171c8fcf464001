"""Each recipe's --print-config document against the numbers its sources state (mlcommons/training
README_tensorflow2.md and MLPerf's published runs; libffcv/ffcv-imagenet rn50_configs and
train_imagenet.py; Goyal et al. 2017; pytorch/examples imagenet/main.py), at the published global
batches and between them; the checks of the settings the recipes use."""
import json
import os
from unittest import mock

import pytest

from hpc_imagenet.imagenet import recipes
from hpc_imagenet.imagenet.run import train_command
from hpc_imagenet.imagenet.train import optim, schedules
from hpc_imagenet.imagenet.config import choices, parse_command
from hpc_imagenet.launch import environment

# libffcv/ffcv-imagenet rn50_configs/rn50_{epochs}_epochs.yaml (start_ramp, end_ramp) and README's top-1
FFCV_RUNS = [(16, 11, 13, 73.8), (24, 17, 20, 75.6), (32, 23, 27, 76.6), (40, 29, 34, 77.2), (56, 41, 48, 78.0),
             (88, 65, 76, 78.4)]
# MLPerf's published runs: (global batch, LR, warm-up epochs, momentum, weight decay). 2,048 and 4,096:
# mlcommons/training image_classification/README_tensorflow2.md (GPU-V100-8: --batch_size=1024 with
# --num_accumulation_steps=2 and --base_learning_rate=8.5; TPU-V3-64: --batch_size=4096,
# --base_learning_rate=10.0; both --warmup_epochs=5 --weight_decay=0.0002 --momentum=0.9); 8,192 and
# 32,768: mlcommons/training_results_v1.0 Google tpu-v4-128-TF and tpu-v4-4096-TF run_and_time.sh.
MLPERF_RUNS = [(2048, 8.5, 5.0, 0.9, 2e-4), (4096, 10.0, 5.0, 0.9, 2e-4), (8192, 17.0, 5.0, 0.9, 2e-4),
               (32768, 29.0, 18.0, 0.929, 1e-4)]


def _torchrun(processes):
    return {"RANK": "0", "WORLD_SIZE": str(processes), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "8",
            "MASTER_ADDR": "h", "MASTER_PORT": "1"}


def _command(argv, processes=1):
    command = parse_command([*argv, "--print-config", "/no/such/path"], "ddp",
                            launcher=environment.detect({} if processes == 1 else _torchrun(processes)))
    assert command.print_config
    return command.settings


def _printed(argv, processes=1):
    return _command(argv, processes).to_dict()  # what --print-config prints


def _lr(settings, iteration, steps_per_epoch):
    """The engine's LR at ITERATION for these settings (optim's peak, warm-up and schedule)."""
    peak = optim.peak_lr(settings.optim, settings.batch.global_batch)
    warmup = optim.warmup_epochs(settings.optim, peak)
    return peak * optim.lr_factor(iteration, steps_per_epoch, settings.optim, warmup, peak)


@pytest.mark.parametrize("global_batch,lr,warmup,momentum,decay", MLPERF_RUNS)
def test_mlperf_at_each_published_global_batch_uses_that_runs_values(global_batch, lr, warmup, momentum, decay):
    doc = _printed(["-a", "resnet50", "-b", str(global_batch // 8), "--recipe", "mlperf"], processes=8)
    optim_doc = doc["optim"]
    assert doc["batch"]["global_batch"] == global_batch
    assert (optim_doc["lr"], optim_doc["lr_scaling"]) == (lr, "none")
    assert (optim_doc["warmup_epochs"], optim_doc["lr_warmup_decay"]) == (warmup, 0.0)
    assert (optim_doc["momentum"], optim_doc["weight_decay"]) == (momentum, decay)
    assert (optim_doc["opt"], optim_doc["lars_coefficient"], optim_doc["no_bn_wd"]) == ("lars", 0.001, True)
    assert (optim_doc["lr_schedule"], optim_doc["lr_power"], optim_doc["lr_end"]) == ("poly", 2.0, 1e-4)
    assert (optim_doc["label_smoothing"], optim_doc["epochs"]) == (0.1, 42)
    # the reference's --epochs_between_evals=4 --eval_offset_epochs=2
    assert (optim_doc["eval_every"], optim_doc["eval_offset"]) == (4, 2)


def test_mlperf_at_2048_uses_the_published_8_5_not_lars_utils_10():
    """lars_util.py's class default is 10.0 below 16k; the reference's 2,048 command overrides it: 8.5."""
    assert _printed(["-b", "256", "--recipe", "mlperf"], processes=8)["optim"]["lr"] == 8.5


@pytest.mark.parametrize("global_batch,lr", [(256, 8.5), (2896, 8.5), (2897, 10.0), (13312, 17.0),
                                             (16384, 17.0), (16385, 29.0), (53248, 29.0)])
def test_mlperf_between_published_batches_takes_the_nearest_on_a_log_scale(global_batch, lr):
    settings = _command(["-b", str(global_batch), "--recipe", "mlperf"])
    assert settings.batch.global_batch == global_batch and settings.optim.lr == lr


def test_mlperf_validates_as_the_reference_every_4_epochs_from_epoch_2():
    optim_cfg = _command(["--recipe", "mlperf"]).optim
    assert [n for n in range(1, 43) if optim_cfg.validation_due(n)] == [2, 6, 10, 14, 18, 22, 26, 30, 34, 38, 42]
    every_4 = _command(["--eval-every", "4", "--epochs", "10"]).optim
    assert [n for n in range(1, 11) if every_4.validation_due(n)] == [4, 8, 10]  # no offset: as before


def test_examples_divides_the_lr_at_30_and_60_as_main_pys_steplr():
    """main.py: StepLR(optimizer, step_size=30, gamma=0.1) over 90 epochs: x0.1 from epochs 30 and 60 only."""
    settings = _command(["--recipe", "examples"])
    assert settings.to_dict()["optim"]["lr_steps"] == [30, 60]
    main_py = [0.1 * 0.1 ** (epoch // 30) for epoch in range(90)]  # StepLR's closed form at batch 256
    assert [_lr(settings, epoch * 10, 10) for epoch in range(90)] == pytest.approx(main_py)


def test_goyal_at_8192_warms_up_from_0_1_to_3_2_over_5_epochs():
    """Goyal et al. 2017, section 2.2: gradual warm-up from eta = 0.1 to k x eta (at 8k: 3.2) over 5 epochs."""
    settings = _command(["-b", "1024", "--recipe", "goyal"], processes=8)
    assert settings.batch.global_batch == 8192 and settings.optim.lr_warmup_from_base
    steps = 156  # an ImageNet epoch at 8,192 images a step
    assert [_lr(settings, it, steps) for it in (0, 5 * steps // 2, 5 * steps)] == pytest.approx([0.1, 1.65, 3.2])


def test_goyal_at_256_has_no_warm_up():
    settings = _command(["-b", "256", "--recipe", "goyal"])
    assert {_lr(settings, it, 100) for it in range(0, 3000, 7)} == {0.1}


def _entry_script_prints(capsys, *argv):
    """imagenet_ddp.py ARGV --print-config DATA, as one process outside any launcher."""
    with mock.patch.dict(os.environ, {"PATH": os.environ.get("PATH", "")}, clear=True):
        assert train_command.main("ddp", [*argv, "--print-config", "DATA"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_entry_script_prints_each_fixed_value(capsys):
    """What a user checks before submitting: main.py's steps, Goyal's warm-up start, MLPerf's 2,048 LR."""
    assert _entry_script_prints(capsys, "--recipe", "examples")["optim"]["lr_steps"] == [30, 60]
    goyal = _entry_script_prints(capsys, "--recipe", "goyal", "-b", "8192")
    assert goyal["batch"]["global_batch"] == 8192
    # the warm-up starts at --lr (0.1) and rises to 0.1 x 8192 / 256 = 3.2 over 5 epochs
    assert (goyal["optim"]["lr"], goyal["optim"]["lr_warmup_from_base"], goyal["optim"]["warmup_epochs"]) == (
        0.1, True, 5.0)
    mlperf = _entry_script_prints(capsys, "--recipe", "mlperf", "-b", "2048")
    assert (mlperf["batch"]["global_batch"], mlperf["optim"]["lr"]) == (2048, 8.5)


@pytest.mark.parametrize("epochs,start,end,top1", FFCV_RUNS)
def test_ffcv_recipes_as_their_configs(epochs, start, end, top1):
    name = f"ffcv-{epochs}"
    doc = _printed(["-a", "resnet50", "-b", "512", "--recipe", name], processes=8)
    optim_doc, data = doc["optim"], doc["data"]
    assert doc["batch"]["global_batch"] == 4096
    assert optim_doc["lr"] * 4096 / 256 == pytest.approx(1.7)  # lr 1.7 at 8 x 512
    assert (optim_doc["opt"], optim_doc["lr_schedule"], optim_doc["lr_peak_epoch"]) == ("sgd", "ramp", 2.0)
    assert (optim_doc["momentum"], optim_doc["weight_decay"], optim_doc["label_smoothing"]) == (0.9, 1e-4, 0.1)
    assert optim_doc["no_bn_wd"] and optim_doc["epochs"] == epochs
    assert (data["min_res"], data["max_res"], data["start_ramp"], data["end_ramp"]) == (160, 192, start, end)
    assert (data["val_crop_size"], data["val_resize_size"]) == (256, 293)
    recipe = recipes.RECIPES[name]
    assert (recipe.top1, recipe.epochs, recipe.published_batch) == (top1, epochs, 4096)
    assert f"rn50_{epochs}_epochs.yaml" in recipe.source


@pytest.mark.parametrize("opt", ["lars", "lamb"])
def test_layerwise_optimizers_record_that_norms_and_biases_get_no_decay(opt):
    """MLPerf's LARS skip list (lars_optimizer.py): BN and bias get neither the trust ratio nor weight decay,
    and the settings (run.json) say so; the weights keep --wd and the ratio."""
    import torch

    assert _printed(["--opt", "sgd"])["optim"]["no_bn_wd"] is False
    settings = _command(["--opt", opt, "--wd", "2e-4"])
    assert settings.optim.no_bn_wd is True
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, bias=False), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                torch.nn.Linear(4, 2))
    groups = optim.build_optimizer(model, settings.optim, 1.0).param_groups
    by_count = sorted((len(g["params"]), g["weight_decay"], g["adapt"]) for g in groups)
    # conv and linear weights: decayed and adapted; BN's weight and bias and the linear bias: neither
    assert by_count == [(2, 2e-4, True), (3, 0.0, False)]


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
       (["--mixup-alpha", "-1"], "--mixup-alpha -1"),
       (["--opt", "lars", "--norm-weight-decay", "1e-4"], "--opt lars applies no weight decay to normalisation"),
       (["--opt", "lamb", "--norm-weight-decay", "0.01"], "drop --norm-weight-decay 0.01, or use --opt sgd"),
       (["--eval-every", "4", "--eval-offset", "5"], "--eval-offset 5: the first validation's epoch, from 1 to"),
       (["--eval-offset", "-1"], "--eval-offset -1"),
       (["--lr-warmup-from-base", "--lr-warmup-decay", "0.1"], "drop --lr-warmup-decay"),
       (["--lr-warmup-from-base", "--lr-scaling", "none"], "use --lr-scaling linear")]


@pytest.mark.parametrize("argv,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_component_settings_fail_in_one_line(argv, message):
    from hpc_imagenet.imagenet.config import ConfigError

    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as caught:
        parse_command([*argv, "/no/such/path"], "ddp", check_data=False, launcher=environment.detect({}))
    assert "\n" not in str(caught.value)


def test_schedule_and_optimizer_choices_match_the_engine():
    assert choices.LR_SCHEDULES == schedules.KINDS
    assert set(choices.OPTIMIZERS) == {"sgd", "sgd_nesterov", "rmsprop", "adamw", "lars", "lamb"}
