"""hpc_imagenet.slurm.jobchain without a cluster: --dry-run's sbatch lines, the stages' batch files, the checks before
submitting, a stage's progress as `status` shows it (the chain on a real cluster:
tests/cluster/test_jobchain.py)."""
from __future__ import annotations

import json
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from hpc_imagenet.imagenet.data import archives
from hpc_imagenet.slurm.generate import render, spec_from_args
from hpc_imagenet.slurm.jobchain import chain as ch
from hpc_imagenet.slurm.jobchain import chain_commands, preflight
from hpc_imagenet.slurm.jobchain import state as st

SITE = ["--partition", "gpu", "--account", "proj42", "--module", "cuda/12.4", "--nodes", "2", "--arch", "resnet50",
        "--", "--recipe", "torchvision-v2"]


@pytest.fixture
def download(tmp_path: Path) -> Path:
    """Three files named as ILSVRC 2012's, the two tars empty but whole (their end blocks)."""
    folder = tmp_path / "download"
    folder.mkdir()
    for name in (archives.TRAIN_TAR, archives.VAL_TAR):
        tarfile.open(folder / name, "w").close()
    (folder / archives.DEVKIT).write_bytes(b"devkit")
    return folder


def _chain(tmp_path: Path, download: Path, argv=SITE, on_login_node: bool = True) -> ch.Chain:
    spec = ch.with_mounts(spec_from_args(argv, on_login_node), download, tmp_path / "out")
    return ch.Chain(download, st.Layout(tmp_path / "out"), spec, prepare_tasks=4)


def test_dry_run_prints_every_sbatch_line_and_writes_nothing(download, tmp_path, capsys):
    out = tmp_path / "out"
    assert chain_commands.main(["submit", str(download), str(out), "--any-archives", "--dry-run", "--prepare-tasks",
                                "4", *SITE]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[-1] for line in lines] == [str(out / "jobs" / f"{s}.sh") for s in st.STAGES]
    assert "--array=0-3" in lines[1] and "--dependency=afterok:<plan>" in lines[1]
    assert f"--export=ALL,LOG_DIR={out / 'run'}" in lines[3] and "afterok:<check>" in lines[3]
    assert "--dependency=afterany:<train>:<export>" in lines[6]
    assert all("--kill-on-invalid-dep=yes" in line for line in lines)
    assert not out.exists()


def test_stages_carry_the_site_options(download, tmp_path):
    chain = _chain(tmp_path, download)
    texts = ch.scripts(chain)
    layout = chain.layout
    assert texts["train"] == render(replace(spec_from_args(SITE), data=str(layout.data),
                                            output=str(layout.logs / "train-%j.out")))
    for name in ("plan", "prepare", "check", "evaluate", "export", "report"):
        text = texts[name]
        assert "#SBATCH --partition=gpu" in text and "#SBATCH --account=proj42" in text and "cuda/12.4" in text
        task = "convert" if name == "prepare" else name
        command = (f"hpc_imagenet.harness.jobchain_report {layout.out} --tag" if name == "report"
                   else f"hpc_imagenet.slurm.jobchain.tasks {task}")
        assert "#SBATCH --nodes=1" in text and f'"$PYTHON" -m {command}' in text
    assert "#SBATCH --gpus-per-node=1" in texts["evaluate"] and "--gpus-per-node" not in texts["plan"]
    assert "--recipe torchvision-v2" in texts["evaluate"] and "-a resnet50" in texts["evaluate"]
    assert "prepare-%A_%a.out" in texts["prepare"]


def test_stages_run_in_the_container(download, tmp_path):
    argv = ["--container", "/images/pytorch.sif", "--container-runtime", "apptainer", *SITE]
    texts = ch.scripts(_chain(tmp_path, download, argv, on_login_node=False))  # no apptainer on this machine
    assert f"{download},{tmp_path / 'out'}" in texts["train"]  # both mounted
    # the CPU stages run in the image over a clean environment, the GPU's options only where a stage has GPUs
    assert 'apptainer exec --cleanenv --bind "$CONTAINER_MOUNTS"' in texts["plan"].split("-m "
                                                                                         "hpc_imagenet.slurm.jobchain.tasks")[0]
    assert "exec --cleanenv --nv --bind" in texts["evaluate"]


def test_charliecloud_is_refused_for_the_chain_in_one_line(download, tmp_path):
    argv = ["--container", "/images/pytorch", "--container-runtime", "charliecloud", *SITE]
    with pytest.raises(st.ChainError, match="ch-run binds under /mnt/N; use apptainer, pyxis or podman-hpc"):
        _chain(tmp_path, download, argv, on_login_node=False)


def test_array_ranges():
    assert ch._ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8" and ch._ranges([3]) == "3"


def test_archives_checked_before_anything(download, tmp_path):
    with pytest.raises(st.ChainError, match="not the published 147,897,477,120"):
        preflight.check_archives(download)
    preflight.check_archives(download, official=False)
    with open(download / archives.VAL_TAR, "ab") as f:
        f.write(b"x" * 100)  # a tar cut short ends in data, not in its two zero blocks
    with pytest.raises(st.ChainError, match="ends mid-file"):
        preflight.check_archives(download, official=False)
    (download / archives.TRAIN_TAR).unlink()
    with pytest.raises(st.ChainError, match="ILSVRC2012_img_train.tar is missing"):
        preflight.check_archives(download, official=False)


def test_no_room_is_one_line(tmp_path, capsys):
    with pytest.raises(st.ChainError, match="GB free but the shards need"):
        preflight.check_space(tmp_path / "new" / "out", 10**18, tmp_path / "new" / "out" / "data")
    preflight.check_space(tmp_path / "out", 10**6, tmp_path / "out" / "data")
    assert chain_commands.main(["status", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_chain_of_an_earlier_version_is_named_not_mistaken_for_none(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / st.EARLIER_STATE).write_text("{}")
    assert chain_commands.main(["status", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "submitted by an earlier version (pipeline.json)" in err
    assert "submit again to a new folder" in err


def test_training_progress_line(tmp_path):
    log = tmp_path / "train-7.out"
    log.write_text("Epoch: [1][ 2/8]  loss 1.0\nEpoch: [1][ 6/8]  loss 0.9\n")
    run = {"epochs": [{"epoch": 0, "elapsed_s": 1800.0}], "final": {"best_top1": 12.5}}
    assert st.train_progress(run, log, 4) == "epoch 2/4 step 6/8, best top-1 12.50 %, ETA 1:30"


def test_stage_states_from_markers_and_queue(tmp_path):
    layout = st.Layout(tmp_path)
    log = str(layout.logs / "x.out")
    state = {"epochs": 2, "jobs": {"plan": {"id": "1", "log": log},
                                   "prepare": {"id": "2", "log": log, "tasks": [0, 1]},
                                   "check": {"id": "3", "log": log}}}
    st.write_marker(layout.marker("plan"), "done", job="1", shards=4)
    st.write_marker(layout.marker("prepare", 0), "done", job="2")
    queued = {"2_1": ("RUNNING", "None"), "3": ("PENDING", "Dependency")}
    now = {s.name: s for s in st.stages(layout, state, queued=queued)}
    assert now["plan"].state == "done" and now["prepare"].state == "running"
    assert now["prepare"].detail == "0/4 shards written" and now["check"].state == "pending (Dependency)"
    st.write_marker(layout.marker("prepare", 1), "failed", job="2", error="DataError: disk full")
    now = {s.name: s for s in st.stages(layout, state, queued={})}
    assert now["prepare"].failed and "task(s) 1 failed: DataError: disk full" in now["prepare"].detail
    assert now["check"].state == "cancelled" and now["train"].state == "not submitted"
    assert json.loads(layout.marker("plan").read_text())["status"] == "done"
