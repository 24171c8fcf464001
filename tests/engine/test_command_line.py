"""A bad command line fails at once, before torch, staging or the dataset scan; --print-config prints
the resolved settings; run.json holds the same settings document."""
import json
import time

import pytest

from tests.helpers import TINY, child_env, python, read_run, script
from tests.warm_start import warm_python

BAD = [
    (["--data-backend", "falst"], "error: unknown --data-backend 'falst'; did you mean fast?"),
    (["-a", "resnet999"], "error: unknown model -a 'resnet999'; did you mean resnet50"),
    (["--opt-level", "O7"], "error: argument --opt-level: invalid choice: 'O7'"),
    (["--recipe", "goyall"], "error: unknown --recipe 'goyall'; known recipes: examples, ffcv-16"),
]
TORCHRUN_64 = {"RANK": "9", "WORLD_SIZE": "64", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1",
               "MASTER_ADDR": "node0", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "job"}


def imported_torch(importtime_stderr: str) -> bool:
    """Whether python -X importtime's report lists the torch package."""
    return any(line.split("|")[-1].strip() == "torch" for line in importtime_stderr.splitlines()
               if line.startswith("import time:"))


@pytest.mark.parametrize("argv, line", BAD, ids=[argv[0] for argv, _ in BAD])
def test_bad_flag_fails_in_one_line_before_torch_and_staging(tmp_path, argv, line):
    data, stage = tmp_path / "data", tmp_path / "stage"
    (data / "train" / "a").mkdir(parents=True)
    (data / "val" / "a").mkdir(parents=True)
    stage.mkdir()
    command = [script("imagenet_ddp.py"), *argv, "--stage-dir", stage, data]
    started = time.monotonic()
    proc = python(*command, env=child_env(**TORCHRUN_64))
    elapsed = time.monotonic() - started
    print(f"{argv}: exit {proc.returncode} in {elapsed:.2f} s")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [proc.stderr.strip()] and proc.stderr.startswith(line), proc.stderr
    assert proc.stdout == "" and list(stage.iterdir()) == []
    assert not imported_torch(python("-X", "importtime", *command, env=child_env(**TORCHRUN_64)).stderr)


def test_print_config_resolves_the_launchers_world_without_data_or_torch():
    proc = python("-X", "importtime", script("imagenet_ddp.py"), "-a", "resnet50", "-b", "208", "--recipe", "goyal",
                  "--warmup-epochs", "3", "--print-config", "/no/such/path", env=child_env(**TORCHRUN_64))
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert document["batch"] == {"processes": 64, "per_process": 208, "global_batch": 13312, "workers": 4,
                                 "launcher": "torchrun", "node_processes": 1, "accum_steps": 1}
    assert document["run"]["recipe"] == "goyal" and document["model"]["arch"] == "resnet50"
    assert document["optim"]["no_bn_wd"] is True and document["optim"]["warmup_epochs"] == 3.0  # the flag wins
    assert document["data"]["root"] == "/no/such/path"
    assert not imported_torch(proc.stderr)


def test_run_json_stores_the_printed_settings(tmp_path):
    argv = [*TINY, "-a", "resnet18", "--dummy", "--dummy-size", "16", "--num-classes", "4", "--epochs", "1",
            "--val-steps", "1", "--recipe", "goyal", "--log-dir", tmp_path]  # goyal zero-inits residual blocks
    printed = python(script("imagenet_nd.py"), *argv, "--print-config")
    assert printed.returncode == 0, printed.stderr
    trained = warm_python(script("imagenet_nd.py"), *argv)  # a training run: its start-up is not what is tested
    assert trained.returncode == 0, trained.stderr
    assert read_run(tmp_path)["config"] == json.loads(printed.stdout)
    assert "recipe goyal" in trained.stdout
