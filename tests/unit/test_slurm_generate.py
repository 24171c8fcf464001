"""hpc_imagenet.slurm.generate: committed examples match the generator, values are quoted, bad input is one
line (a real ``sbatch --test-only`` of every file on the test cluster: tests/cluster/test_sbatch_test_only.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from hpc_imagenet.slurm import generate, start_budget
from hpc_imagenet.slurm.generate import EXAMPLES, GenerateError, JobSpec, render, spec_from_args
from hpc_imagenet.slurm.generate.renderer import _modules
from tests.helpers import eval_settings

REPO = Path(__file__).resolve().parents[2]
COMMITTED = sorted((REPO / "slurm").glob("*.sh"))


# ---------------------------------------------------------------- committed examples


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_committed_example_matches_the_generator(name: str) -> None:
    path = REPO / "slurm" / f"{name}.sh"
    assert path.exists(), f"slurm/{name}.sh missing: run python -m hpc_imagenet.slurm.generate --write-examples"
    assert path.read_text() == generate.render_example(name), (
        f"slurm/{name}.sh drifted from hpc_imagenet/slurm/generate/: run python -m hpc_imagenet.slurm.generate "
        f"--write-examples")


def test_every_committed_file_is_an_example() -> None:
    assert {p.stem for p in COMMITTED} == set(EXAMPLES)
    assert {"ddp_4node", "ddp_1node", "nd_1gpu", "dp_1node", "ddp_apex_2node", "mpi_4node"} <= set(EXAMPLES)


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_committed_file_is_valid_bash(path: Path) -> None:
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_ddp_4node_is_what_the_users_expect() -> None:
    text = (REPO / "slurm" / "ddp_4node.sh").read_text()
    for line in ("#SBATCH --nodes=4", "#SBATCH --gpus-per-node=4", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --requeue", '--nproc-per-node="$PROCS_PER_NODE"', "--rdzv-backend=c10d",
                 "imagenet/imagenet_ddp_apex.py"):
        assert line in text


@pytest.mark.parametrize("argv, env, procs", [
    (["--gpus-per-node", "4"], {}, "4"),  # outside SLURM's allocation: the file's count
    (["--gpus-per-node", "4"], {"SLURM_GPUS_ON_NODE": "2"}, "2"),  # sbatch --gpus-per-node=2
    (["--gpus-per-node", "4"], {"SLURM_GPUS_ON_NODE": "2", "PROCS_PER_NODE": "1"}, "1"),  # --export wins
    (["--gpus-per-node", "4", "--launcher", "mpi"], {"SLURM_GPUS_ON_NODE": "8"}, "8"),
    (["--gpus-per-node", "0", "--procs-per-node", "3", "--launcher", "srun"], {"SLURM_NTASKS_PER_NODE": "2"}, "2"),
    (["--gpus-per-node", "0", "--procs-per-node", "3"], {"SLURM_NTASKS_PER_NODE": "1"}, "3"),  # torchrun on CPUs
])
def test_processes_per_node_follow_the_allocation(argv, env, procs) -> None:
    """A file written for 4 GPUs a node, submitted with fewer, starts one process per allocated GPU
    (4 processes on 2 GPUs would share them); on CPU nodes the per-task launchers follow the tasks."""
    text = render(spec_from_args(argv))
    assert eval_settings(text, ["PROCS_PER_NODE"], env) == [procs]
    assert '"$PROCS_PER_NODE"' in text


def test_one_process_variants_have_no_per_node_count() -> None:
    text = render(spec_from_args(["--variant", "dp"]))
    assert "PROCS_PER_NODE" not in text and "--ntasks-per-node=1 " in text


def test_recovery_settings_are_in_every_file() -> None:
    """Every file restarts a failed step within the start budget (torchrun's restarts bounded by what it
    leaves), srun ends a step whose task failed, and multi-GPU files set the NCCL watchdog; the two
    bounds are settings (their behaviour: tests/unit/test_start_budget.py)."""
    for path in COMMITTED:
        text = path.read_text()
        assert "MAX_RESTARTS=${MAX_RESTARTS:-3}" in text and "MAX_STARTS=${MAX_STARTS:-10}" in text
        assert 'if [ "$left" -le 0 ]; then' in text and "note_start" in text, path.name
        assert ("--kill-on-bad-exit=1" in text) == ("mpirun " not in text), path.name
        torchrun = "torch.distributed.run" in text
        assert ("--max-restarts=$((left > 1 ? left - 1 : 0))" in text) == torchrun, path.name
        assert ("--no-python bash -c" in text) == torchrun, path.name
        nccl = "export TORCH_NCCL_ASYNC_ERROR_HANDLING=${TORCH_NCCL_ASYNC_ERROR_HANDLING:-1}" in text
        assert nccl == (path.stem not in ("nd_1gpu", "dp_1node")), path.name
    text = render(JobSpec(max_restarts=0, max_starts=5))
    assert eval_settings(text, ["MAX_RESTARTS", "MAX_STARTS"], {}) == ["0", "5"]
    assert eval_settings(text, ["MAX_RESTARTS"], {"MAX_RESTARTS": "5"}) == ["5"]


def test_the_checkpoint_the_budget_watches_is_the_trainers() -> None:
    from hpc_imagenet.imagenet.train.checkpoint import CHECKPOINT

    assert start_budget.CHECKPOINT == CHECKPOINT


def _load_modules(text: str, env: dict, module: str = "") -> subprocess.CompletedProcess:
    """The settings and module lines of TEXT run by bash with ENV; MODULE: a shell function standing
    in for the site's ``module`` command (none: the node has no module command)."""
    block = text[text.index("# ---- settings"):text.index("# ---- software environment")]
    probe = module + "\n" + block + "\n".join(_modules()) + "\necho loaded\n"
    return subprocess.run(["bash", "-c", probe], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": "42", **env})


def test_modules_are_a_setting_that_a_site_without_modules_skips() -> None:
    text = (REPO / "slurm" / "mpi_4node.sh").read_text()
    assert "MODULES=${MODULES-openmpi}" in text and "module load openmpi" not in text
    missing = _load_modules(text, {})
    assert missing.returncode == 2 and missing.stdout == "", missing
    assert missing.stderr.strip().splitlines() == [
        "error: MODULES=\"openmpi\" but this node has no 'module' command: submit with --export=ALL,MODULES= "
        "(and the software on PATH), or load the site's modules init before sbatch"]
    skipped = _load_modules(text, {"MODULES": ""})
    assert skipped.returncode == 0 and skipped.stdout == "loaded\n", skipped
    site = 'module() { echo "module $*"; [ "$2" != nosuch ]; }'
    replaced = _load_modules(text, {"MODULES": "openmpi/4.1 cuda/12"}, site)
    assert replaced.stdout == "module load openmpi/4.1\nmodule load cuda/12\nloaded\n", replaced
    bad = _load_modules(text, {"MODULES": "nosuch"}, site)
    assert bad.returncode == 2 and bad.stderr.strip() == (
        'error: module load nosuch failed: submit with --export=ALL,MODULES="<names that module avail lists>" '
        "(MODULES= for none)"), bad
    none = _load_modules((REPO / "slurm" / "ddp_1node.sh").read_text(), {})
    assert none.returncode == 0 and none.stdout == "loaded\n", none


def test_render_is_pure() -> None:
    spec = spec_from_args(EXAMPLES["mpi_4node"])
    first = render(spec)
    with mock.patch.dict(os.environ, {"SLURM_JOB_ID": "7", "HOME": "/elsewhere"}, clear=True):
        assert render(spec) == first


# ---------------------------------------------------------------- quoting


NASTY = ["/data/with space", "/d/$(touch /tmp/pwned)", "/d/`id`", "a'b\"c", "x;y&&z|w", "${HOME}", "}*?[a]"]


@pytest.mark.parametrize("value", NASTY)
def test_values_reach_the_script_verbatim(value: str) -> None:
    text = render(JobSpec(data=value, arch=value, env=(("NCCL_SOCKET_IFNAME", value),), train_args=("--lr", "0.1")))
    assert eval_settings(text, ["DATA", "ARCH"], {}) == [value, value]
    assert not Path("/tmp/pwned").exists()


def test_export_overrides_the_defaults_and_log_dir_is_per_job() -> None:
    text = render(JobSpec(epochs=90))
    assert eval_settings(text, ["EPOCHS", "DATA", "LOG_DIR"], {"EPOCHS": "3", "DATA": "/x y"}) == \
        ["3", "/x y", "runs/j-42"]


def test_sweep_makes_a_job_array_over_the_product() -> None:
    spec = spec_from_args(["--sweep", "BATCH_SIZE=32,64", "--sweep", "ARCH=resnet18,resnet50"])
    text = render(spec)
    assert "#SBATCH --array=0-3" in text and "#SBATCH --output=%x-%A_%a.out" in text
    points = [eval_settings(text, ["BATCH_SIZE", "ARCH"], {"SLURM_ARRAY_TASK_ID": str(i)}) for i in range(4)]
    assert points == [["32", "resnet18"], ["32", "resnet50"], ["64", "resnet18"], ["64", "resnet50"]]


# ---------------------------------------------------------------- bad input: one line each


BAD = {
    "nodes < 1": (["--nodes", "0"], "--nodes must be at least 1"),
    "tasks vs gpus": (["--launcher", "srun", "--gpus-per-node", "4", "--tasks-per-node", "2"],
                      "does not match --gpus-per-node 4"),
    "torchrun tasks": (["--launcher", "torchrun", "--tasks-per-node", "4"], "one task per node"),
    "unknown variant": (["--variant", "fsdp"], "unknown variant 'fsdp'"),
    "bad time": (["--time", "1 day"], "time limit '1 day' does not parse"),
    "bad time 2": (["--time", "12:xx"], "does not parse"),
    "signal after limit": (["--time", "2", "--signal-seconds", "300"], "--signal-seconds 300"),
    "nd on 2 nodes": (["--variant", "nd", "--nodes", "2"], "runs on one node"),
    "quote in directive": (["--name", "it's"], "no quotes"),
    "newline": (["--data", "/a\n#SBATCH --nodes=99"], "newline"),
    "managed flag": (["--", "-b", "64"], "use --batch-size"),
    "unknown flag": (["--", "--no-such-flag"], "no-such-flag"),
    "bad mem": (["--mem", "lots"], "--mem 'lots'"),
    "bad env": (["--env", "1BAD=x"], "--env '1BAD'"),
    "bad sweep": (["--sweep", "LOG_DIR=a,b"], "--sweep LOG_DIR"),
    "negative restarts": (["--max-restarts", "-1"], "--max-restarts must be 0"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line(case: str) -> None:
    argv, expected = BAD[case]
    with pytest.raises(GenerateError) as err:
        render(spec_from_args(argv))
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_cli_prints_one_line_and_exits_2() -> None:
    proc = subprocess.run([sys.executable, "-m", "hpc_imagenet.slurm.generate", "--nodes", "0"], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: --nodes must be at least 1")


def test_cli_writes_the_script_to_stdout() -> None:
    proc = subprocess.run([sys.executable, "-m", "hpc_imagenet.slurm.generate", "--nodes", "2", "--launcher", "srun"],
                          cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --nodes=2" in proc.stdout and "#SBATCH --ntasks-per-node=4" in proc.stdout


def test_a_recipe_passes_through_like_any_training_flag() -> None:
    text = render(spec_from_args(["--", "--recipe", "mlperf", "--label-smoothing", "0.1"]))
    trainer_lines = [line for line in text.splitlines() if "--recipe" in line]
    assert trainer_lines and all("--recipe mlperf --label-smoothing 0.1" in line for line in trainer_lines)


def test_a_recipe_sets_the_scripts_epochs_unless_the_generator_is_told() -> None:
    assert eval_settings(render(spec_from_args(["--", "--recipe", "mlperf"])), ["EPOCHS"], {}) == ["42"]
    assert eval_settings(render(spec_from_args(["--epochs", "5", "--", "--recipe", "mlperf"])), ["EPOCHS"], {}) == ["5"]


def test_managed_flags_are_every_spelling_the_trainers_accept():
    """Read from the settings, so a new spelling of a managed setting is refused without a second list."""
    assert generate.managed_flags() == {
        "-a": "--arch", "--arch": "--arch", "--model": "--arch",
        "--output-dir": "--log-dir", "--epochs": "--epochs", "-b": "--batch-size", "--b": "--batch-size",
        "--batch-size": "--batch-size", "-j": "--workers", "--workers": "--workers", "--log-dir": "--log-dir",
        "--resume": "(always --resume auto)", "--variant": "--variant", "--stage-dir": "--stage-dir"}
