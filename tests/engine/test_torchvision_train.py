"""torchvision's reference command line trains under torchrun on 2 CPU processes with its flags as written
(the script swapped, the sizes shrunk for 2 cores), and the augmentation policies train on the batch
backends (device, dali), whose augmentation runs outside the loader's per-sample transform."""
import pytest

from tests.engine.dali_colours import needs_dali
from tests.helpers import BIN, TORCHVISION_COMMAND, explain, read_run, run, script
from tests.warm_start import warm_python

# after the command, so that these win (argparse keeps the last): a small model, 32 px, 2 short epochs
SMALL = ["--model", "resnet18", "--batch-size", "4", "--epochs", "2", "--steps-per-epoch", "2", "--val-steps", "1",
         "--train-crop-size", "32", "--val-resize-size", "36", "--val-crop-size", "32", "-j", "0", "--seed", "0",
         "--dist-backend", "gloo", "-p", "1"]


def test_torchvision_command_trains_under_torchrun(jpeg_data, tmp_path):
    proc = run([BIN / "torchrun", "--standalone", "--nproc_per_node=2", script("imagenet_ddp.py"),
                *TORCHVISION_COMMAND, *SMALL, "--data-path", jpeg_data, "--output-dir", tmp_path])
    assert proc.returncode == 0, explain(proc)
    record = read_run(tmp_path)
    assert record["status"] == "finished" and record["dist"]["world_size"] == 2 and len(record["epochs"]) == 2
    data, optim = record["config"]["data"], record["config"]["optim"]
    assert (data["auto_augment"], data["random_erase"]) == ("ta_wide", 0.1)
    assert (data["ra_sampler"], data["ra_reps"]) == (True, 4)
    assert (optim["lr"], optim["lr_scaling"], optim["lr_schedule"]) == (0.5, "none", "cosine")


# the dali backend needs DALI installed (requirements-dev.txt; the compat tier has none): without it the run stops
# with one line (test_dali.py: test_missing_dali_is_one_line_naming_the_package)
@pytest.mark.parametrize("backend,policy", [("device", "augmix"), pytest.param("dali", "ra", marks=needs_dali)])
def test_policies_train_on_the_batch_backends(jpeg_data, tmp_path, backend, policy):
    proc = warm_python(script("imagenet_nd.py"), "-a", "resnet18", "--image-size", "32", "-b", "4", "-j", "1",
                       "--epochs", "1", "--steps-per-epoch", "2", "--val-steps", "1", "--data-backend", backend,
                       "--auto-augment", policy, "--random-erase", "0.5", "--seed", "0", "--log-dir", tmp_path,
                       jpeg_data)
    assert proc.returncode == 0, explain(proc)
    assert read_run(tmp_path)["config"]["data"]["auto_augment"] == policy
