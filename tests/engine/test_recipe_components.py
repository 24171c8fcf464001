"""The large-batch components in the real training script on real JPEGs: LARS + poly + warm-up,
accumulation, EMA, Mixup/CutMix, progressive resizing and separate validation sizes in one run;
the same run stopped mid-epoch and resumed ends with the same weights and the same EMA."""
import torch

from hpc_imagenet.imagenet.process.preemption import STOP_FILE
from tests.helpers import TINY, explain, read_run, script
from tests.warm_start import warm_python

COMPONENTS = ["--opt", "lars", "--lr-scheduler", "poly", "--lr-warmup-epochs", "1", "--lr-warmup-decay", "0",
              "--lr-end", "1e-4", "--accum-steps", "2", "--model-ema", "--model-ema-steps", "1",
              "--mixup-alpha", "0.2", "--cutmix-alpha", "1.0", "--min-res", "32", "--max-res", "64",
              "--start-ramp", "0", "--end-ramp", "1", "--val-resize-size", "40", "--val-crop-size", "36",
              "--zero-init-residual", "--no-bn-wd", "--label-smoothing", "0.1"]
# a ResNet: --zero-init-residual is among the components
ARGS = [*TINY, "-a", "resnet18", "-b", "4", "--seed", "3", "--deterministic", "-p", "1", "--steps-per-epoch", "2",
        "--val-steps", "1", *COMPONENTS, "--epochs", "2"]


def test_all_components_train_on_jpegs_and_resume_mid_epoch(jpeg_data, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    run = warm_python(script("imagenet_nd.py"), *ARGS, "--log-dir", straight, jpeg_data)
    assert run.returncode == 0, explain(run)
    record = read_run(straight)
    assert record["global_batch"] == 8  # 4 per step x 2 micro-batches
    assert record["config"]["optim"]["opt"] == "lars" and record["config"]["optim"]["lr_schedule"] == "poly"
    rows = record["epochs"]
    assert len(rows) == 2 and all(row["val_weights"] == "ema" for row in rows)  # --model-ema: scored on it
    whole = torch.load(straight / "checkpoint.pth.tar", weights_only=True)
    assert whole["scheduler"]["last_epoch"] == 4  # 2 optimizer steps per epoch
    assert int(whole["ema"]["n_averaged"]) == 2  # restarted during the 1-epoch warm-up, then 2 updates
    assert run.stdout.count("(ema)") == 2  # one evaluation an epoch, of the average

    split.mkdir()
    (split / STOP_FILE).touch()  # stop at the first print boundary: epoch 0, step 1
    first = warm_python(script("imagenet_nd.py"), *ARGS, "--log-dir", split, jpeg_data)
    assert first.returncode == 75, explain(first)
    second = warm_python(script("imagenet_nd.py"), *ARGS, "--resume", "auto", "--log-dir", split, jpeg_data)
    assert second.returncode == 0, explain(second)
    assert "step 1" in second.stdout  # resumed mid-epoch
    resumed = torch.load(split / "checkpoint.pth.tar", weights_only=True)
    for part in ("model", "ema"):
        for key, tensor in whole[part].items():
            assert torch.equal(tensor, resumed[part][key]), f"{part} {key} differs after the mid-epoch resume"
