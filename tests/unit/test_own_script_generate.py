"""--script in the batch-file generator: what a user's own script gets, and what is refused in one line."""
from __future__ import annotations

import stat
import subprocess

import pytest

from hpc_imagenet.slurm.generate import GenerateError, render, spec_from_args
from tests.helpers import REPO

EXAMPLE = str(REPO / "launch" / "examples" / "train_ddp.py")


def _render(*argv: str) -> str:
    return render(spec_from_args(["--script", EXAMPLE, "--gpus-per-node", "0", *argv]))


def test_the_script_runs_under_the_requeue_runner_with_its_own_flags() -> None:
    text = _render("--nodes", "2", "--", "--steps", "10")
    assert '-m hpc_imagenet.requeue "$SCRIPT" "${TRAIN_ARGS[@]}"' in text and "TRAIN_ARGS+=(--steps 10)" in text
    assert "export HPC_IMAGENET_RUN_DIR=$LOG_DIR" in text and "HPC_IMAGENET_STOP_GRACE:-150" in text
    assert "--resume auto" not in text and "imagenet/imagenet_" not in text and "DATA=" not in text
    assert 'rm -f "$LOG_DIR/requeue.requested" "$LOG_DIR/stop.ignored"' in text
    assert 'if [ "$preempted" = 1 ] && [ -e "$LOG_DIR/requeue.requested" ]; then' in text


def test_srun_runs_one_task_per_process() -> None:
    text = _render("--launcher", "srun", "--procs-per-node", "2", "--framework", "lightning")
    assert "#SBATCH --ntasks-per-node=2" in text and '"$PYTHON" -m hpc_imagenet.requeue "$SCRIPT"' in text


@pytest.mark.parametrize("argv, says", [
    (["--arch", "resnet50"], "--arch sets the engine's training, and --script runs your own script"),
    (["--stage-dir", "$TMPDIR"], "--stage-dir copies --data to each node: give --data DIR too"),
    (["--data", "/d", "--stage-dir", "$TMPDIR", "--framework", "lightning-native", "--launcher", "srun"],
     "--stage-dir with --framework lightning-native: its tasks run the script alone"),
    (["--data", "/d", "--stage-dir", "/dev/shm"], "a copy in shared memory holds the node's memory"),
    (["--epochs=3"], "--epochs sets the engine's training"),
    (["--launcher", "mpi"], "--launcher mpi with --script: use torchrun (one agent per node) or srun"),
    (["--framework", "lightning", "--launcher", "launch"], "or srun (one task per process, as Lightning wants)"),
    (["--framework", "lightning", "--name", "bash"], "Lightning takes a job of that name for an interactive"),
    (["--framework", "lightning-native"], "--framework lightning-native with --launcher torchrun: Lightning's own "
     "requeue works only under srun (SLURMEnvironment); use --launcher srun, or --framework lightning"),
    (["--framework", "lightning-native", "--launcher", "srun", "--name", "interactive"], "an interactive session"),
    (["--framework", "lightning", "--procs-per-node", "2", "--", "--devices", "4"],
     "the script's devices=4 but the job runs 2 (from --procs-per-node); Lightning stops at a mismatch under SLURM: "
     "pass --procs-per-node 4 or the script's --devices 2"),
    (["--framework", "lightning", "--nodes", "2", "--", "--trainer.num_nodes=4"],
     "the script's num_nodes=4 but the job runs 2 (from --nodes)"),
])
def test_what_cannot_work_is_one_line(argv, says) -> None:
    with pytest.raises(GenerateError, match=None) as err:
        _render(*argv)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_missing_script_is_one_line(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(GenerateError) as err:
        render(spec_from_args(["--script", "train.py", "--gpus-per-node", "0"]))
    assert str(err.value) == "--script train.py: no such file here; give its path from the folder you submit from"


def test_a_lightning_layout_that_matches_the_job_passes() -> None:
    text = _render("--framework", "lightning", "--launcher", "srun", "--procs-per-node", "2", "--nodes", "2", "--",
                   "--devices", "2", "--num_nodes=2")
    assert "TRAIN_ARGS+=(--devices 2 --num_nodes=2)" in text
    _render("--", "--devices", "4")  # a plain script's flags mean what the script says: not checked


def test_lightnings_own_requeue_gets_its_signal_and_an_scontrol_stand_in() -> None:
    """--framework lightning-native: the script alone on each task (no runner), Lightning's USR1 forwarded, a
    stand-in scontrol first on the tasks' PATH that marks the run folder, the host's scontrol requeueing."""
    text = _render("--framework", "lightning-native", "--launcher", "srun", "--procs-per-node", "1", "--", "--native")
    assert '"$PYTHON" -u "$SCRIPT" "${TRAIN_ARGS[@]}" &' in text and "hpc_imagenet.requeue" not in text.split(
        "# ---- launch")[1]
    assert 'scancel --signal=USR1 "$SLURM_JOB_ID"' in text and "    native_requeue &" in text
    assert 'PATH="$REQUEUE_BIN:$PATH" srun ' in text
    # private, made afresh, in a run folder that may not exist yet
    assert '{ rm -rf "$REQUEUE_BIN" && mkdir -p "$LOG_DIR" && mkdir -m 700 "$REQUEUE_BIN"; } || {' in text
    stand_in = text.split("<<'STAND_IN'\n")[1].split("STAND_IN\n")[0]
    assert stand_in.startswith("#!/bin/sh\n") and ': > "$HPC_IMAGENET_RUN_DIR/requeue.requested"' in stand_in
    assert 'import hpc_imagenet" ||' not in text  # nothing of this project needed on the tasks


def test_the_stand_in_is_made_in_a_run_folder_that_does_not_exist_yet(tmp_path) -> None:
    """The batch file's own lines, run by bash: the run folder is new on a first submission."""
    text = _render("--framework", "lightning-native", "--launcher", "srun", "--procs-per-node", "1")
    lines = text[text.index('REQUEUE_BIN="'):text.index('chmod +x "$REQUEUE_BIN/scontrol"\n')]
    run_dir = tmp_path / "new" / "run"
    env = {"PATH": "/usr/bin:/bin", "LOG_DIR": str(run_dir), "HPC_IMAGENET_RUN_DIR": str(run_dir)}
    subprocess.run(["bash", "-c", lines + 'chmod +x "$REQUEUE_BIN/scontrol"\n"$REQUEUE_BIN/scontrol" requeue 7'],
                   env=env, check=True)
    assert (run_dir / "requeue.requested").exists()
    assert stat.S_IMODE((run_dir / ".lightning-requeue").stat().st_mode) == 0o700


def test_a_framework_without_a_script_is_one_line() -> None:
    with pytest.raises(GenerateError) as err:
        render(spec_from_args(["--framework", "lightning-native", "--launcher", "srun", "--gpus-per-node", "0"]))
    assert str(err.value) == ("--framework lightning-native is for your own training script: add --script PATH, "
                              "or drop --framework for the engine's training")


def test_data_is_given_to_the_script_and_staged_on_each_node_first() -> None:
    text = _render("--data", "/shared/imagenet", "--stage-dir", "$TMPDIR", "--nodes", "2")
    assert "DATA=${DATA:-/shared/imagenet}" in text and "export HPC_IMAGENET_DATA=$DATA" in text
    staging_step, launch = text.split("# ---- launch")
    step = [line for line in staging_step.splitlines() if "hpc_imagenet.imagenet.data.staging" in line]
    assert len(step) == 1 and step[0].startswith('srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks="$SLURM_JOB_NUM_NODES" '
                                                 "--ntasks-per-node=1 ")
    assert step[0].endswith("exit 2; }") and "export HPC_IMAGENET_STAGE_DIR=$STAGE_DIR" in staging_step
    assert "STAGE_DIR=${STAGE_DIR:-'$TMPDIR'}" in text and "--stage-dir" not in launch  # the runner finds the copy
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    plain = _render()
    assert "DATA=" not in plain and "HPC_IMAGENET_DATA" not in plain  # the script's data is its own business


def test_a_container_gets_the_contracts_variables() -> None:
    text = render(spec_from_args(["--script", EXAMPLE, "--gpus-per-node", "0", "--data", "/shared/imagenet",
                                  "--container", "nvcr.io#nvidia/pytorch:25.01-py3", "--container-runtime", "pyxis",
                                  "--container-mounts", "/shared", "--launcher", "srun"], on_login_node=False))
    env = text.split("--container-env=")[1].split()[0]
    assert {"HPC_IMAGENET_RUN_DIR", "HPC_IMAGENET_STOP_GRACE", "HPC_IMAGENET_DATA"} <= set(env.split(","))


def _charliecloud(tmp_path, *more: str) -> str:
    image = tmp_path / "image.sqsh"
    image.touch()
    return render(spec_from_args(["--script", EXAMPLE, "--gpus-per-node", "0", "--nodes", "2", "--container",
                                  str(image), "--container-runtime", "charliecloud", *more], on_login_node=False))


def test_charliecloud_tells_the_script_the_images_paths_and_stages_in_the_image(tmp_path) -> None:
    """ch-run sees the run folder at /mnt/2 and DATA at /mnt/1: the contract's variables say so inside, the
    staging step runs in the image as the training does, and a script without --data mounts no DATA."""
    text = _charliecloud(tmp_path, "--data", "/shared/imagenet", "--stage-dir", "$TMPDIR")
    assert "--set-env=HPC_IMAGENET_RUN_DIR=/mnt/2 --set-env=HPC_IMAGENET_DATA=/mnt/1" in text
    (step,) = [line for line in text.splitlines() if "hpc_imagenet.imagenet.data.staging" in line]
    assert ' -c /mnt/0 "$CONTAINER_IMAGE" -- "$PYTHON" -m hpc_imagenet.imagenet.data.staging /mnt/1 "$STAGE_DIR"' \
        in step
    assert text.index('mkdir -p "$LOG_DIR" && : >> "$STARTS_LOG"') < text.index(step)  # the bound folder exists
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0
    plain = _charliecloud(tmp_path)
    assert 'CONTAINER_BINDS=(-b "$REPO:/mnt/0" -b "$RUN_FOLDER:/mnt/2")' in plain
    assert "HPC_IMAGENET_DATA" not in plain and "--set-env=HPC_IMAGENET_RUN_DIR=/mnt/2" in plain
