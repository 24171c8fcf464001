"""Every recipe trains a few steps on real JPEGs, validating on its cadence, and run.json names it; --print-config under
torchrun's variables for 64 ranks shows MLPerf's recipe at a global batch of 13,312; an RSB run follows timm's
per-epoch cosine from epoch 0, down to its floor."""
import json
import math

import pytest

from hpc_imagenet.imagenet import recipes
from tests.helpers import TINY, child_env, explain, read_run, script
from tests.warm_start import warm_python

# tiny overrides of what costs time on 2 CPU cores (flags win over the recipe): 3 epochs of one step;
# a ResNet, for the recipes that zero-initialise each residual block's last BatchNorm
SMALL = [*TINY, "-a", "resnet18", "-b", "4", "--epochs", "3", "--steps-per-epoch", "1", "--val-steps", "1", "-p", "1",
         "--min-res", "32", "--max-res", "32", "--val-crop-size", "32", "--val-resize-size", "36"]
TORCHRUN_64 = {"RANK": "9", "WORLD_SIZE": "64", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1",
               "MASTER_ADDR": "node0", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "job"}


@pytest.mark.parametrize("name", recipes.names())
def test_recipe_trains_on_jpegs_and_run_json_names_it(jpeg_data, tmp_path, name):
    run = warm_python(script("imagenet_nd.py"), *SMALL, "--recipe", name, "--log-dir", tmp_path, jpeg_data)
    assert run.returncode == 0, explain(run)
    record = read_run(tmp_path)
    assert record["config"]["run"]["recipe"] == name and record["status"] == "finished"
    assert len(record["epochs"]) == 3 and all(row["train_loss"] == row["train_loss"] for row in record["epochs"])
    # MLPerf's cadence (--eval-every 4 --eval-offset 2): first after epoch 2, then the last; the others every epoch
    validated = [i for i, row in enumerate(record["epochs"], 1) if "val_top1" in row]
    assert validated == ([2, 3] if name == "mlperf" else [1, 2, 3])


def test_mlperf_print_config_for_64_torchrun_ranks():
    proc = warm_python(script("imagenet_ddp.py"), "-a", "resnet50", "-b", "208", "--recipe", "mlperf", "--print-config",
                  "/no/such/path", env=child_env(**TORCHRUN_64))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["optim"]["opt"] == "lars" and doc["optim"]["lr_schedule"] == "poly"
    assert doc["optim"]["label_smoothing"] == 0.1 and doc["batch"]["global_batch"] == 13312


def test_rsb_run_steps_timms_cosine_from_epoch_0_once_per_epoch(jpeg_data, tmp_path):
    # the peak at 0.005 whatever the tiny batch, a 1-epoch warm-up from timm's 1e-4, 3 epochs of 2 steps
    run = warm_python(script("imagenet_nd.py"), *SMALL, "--recipe", "rsb-a1", "--lr-scaling", "none", "--lr", "0.005",
                      "--warmup-epochs", "1", "--steps-per-epoch", "2", "--log-dir", tmp_path, jpeg_data)
    assert run.returncode == 0, explain(run)
    rows = read_run(tmp_path)["epochs"]
    # each row's LR is the one set for the next epoch: timm's cosine at t = 1, 2 of 3, then its floor
    cosine = [1e-6 + 0.5 * (0.005 - 1e-6) * (1 + math.cos(math.pi * t / 3)) for t in (1, 2, 3)]
    assert [row["lr"] for row in rows] == pytest.approx(cosine)
