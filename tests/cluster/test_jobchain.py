"""python -m hpc_imagenet.slurm.jobchain on the test cluster, from archives in ImageNet's official layout (real tars of
real JPEGs, a devkit) to evaluated, exported weights and a report, as real SLURM jobs with real dependencies.

- One chain whose prepare task 0 is killed mid-way (it blocks on a FIFO standing where one of its shards
  goes, after writing the shards before it, and is scancelled there): the chain stops at prepare and says
  so; the rerun of the same command submits only task 0, which converts only the shards it had not
  written (the others' files are untouched), and the chain goes on to the end: the exported weights load
  strictly into torchvision's model and give the evaluated top-1 on the validation images; a report.
- One chain whose training fails: the later stages never run, `status` names the stage and the reason.
- `cancel` stops a chain; input that cannot work is refused before anything is submitted.
(That the exported weights reproduce a learned model's top-1 is tests/engine/test_export.py's: this
chain's 2 tiny epochs barely learn.)
"""
from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Dict, List

import pytest
import torch
import torchvision
from PIL import Image
from torchvision import transforms

from hpc_imagenet.imagenet.data import demo, sources
from hpc_imagenet.slurm.localcluster.commands import wait_for
from hpc_imagenet.slurm.localcluster.scenarios.jobs import ARCH, VENV
from hpc_imagenet.slurm.jobchain import chain_commands
from hpc_imagenet.slurm.jobchain.prepare_tasks import all_jobs
from hpc_imagenet.slurm.jobchain import state as st
from studies.benches import archive_set

pytestmark = pytest.mark.slurm
WNIDS = ["n01000001", "n02000002", "n03000003"]
TASKS = 3
SHARD_MB = "0.004"  # about 4 images a shard: 12 shards, 4 per task
ARGS = ["--any-archives", "--prepare-tasks", str(TASKS), "--prepare-workers", "1", "--shard-size", SHARD_MB,
        "--variant", "nd", "--gpus-per-node", "0", "--cpus-per-task", "1", "--time", "10", "--venv", str(VENV),
        "--arch", ARCH, "--epochs", "2", "--batch-size", "8", "--workers", "0",
        "--", "--image-size", "32", "--seed", "0", "--model-ema", "--model-ema-steps", "1"]


@pytest.fixture(scope="module")
def download(tmp_path_factory) -> Path:
    """3 classes x 12 training and 4 validation JPEGs, as ILSVRC 2012's train tar, val tar and devkit."""
    root = demo.generate(tmp_path_factory.mktemp("source"), classes=3, train_per_class=12, val_per_class=4,
                         size=(40, 32))
    for split in ("train", "val"):
        for i, wnid in enumerate(WNIDS):
            (root / split / f"class_{i:03d}").rename(root / split / wnid)
    out = tmp_path_factory.mktemp("download")
    archive_set.write_download(root, out)
    return out


def _stages(out: Path) -> Dict[str, st.StageState]:
    layout = st.Layout(out)
    return {s.name: s for s in st.stages(layout, st.load(layout))}


def _settled(out: Path) -> Dict[str, st.StageState]:
    """Wait until no stage of the chain is queued or running (report included); its stages."""
    def quiet():
        now = _stages(out)
        busy = any(s.state == "running" or s.state.startswith("pending") for s in now.values())
        return None if busy or now["report"].state == "not submitted" else now
    return wait_for("the chain to settle", quiet, timeout=150, interval=0.5)


def _status(capsys, out: Path) -> tuple:
    code = chain_commands.main(["status", str(out)])
    return code, capsys.readouterr().out


def _files(folder: Path) -> Dict[str, tuple]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.glob("*.tar")}


def test_killed_prepare_task_resumes_alone_and_the_chain_ends_in_weights(on_cluster, download, tmp_path, capsys):
    out = tmp_path / "out"
    assert chain_commands.main(["submit", str(download), str(out), *ARGS]) == 0
    state = json.loads((out / st.STATE).read_text())
    prepare = state["jobs"]["prepare"]["id"]
    on_cluster.run(["scontrol", "hold", prepare])  # it waits on the plan anyway: no race
    wait_for("the plan", lambda: (st.read_marker(out / "jobs/markers/plan.json") or {}).get("status") == "done", 60)
    names = [job.name for job in all_jobs(st.Layout(out))]
    task0: List[str] = names[0::TASKS]
    os.mkfifo(out / "data" / task0[2])  # task 0 writes its first two shards, then blocks opening this
    on_cluster.run(["scontrol", "release", prepare])
    wait_for("task 0's first shards", lambda: all((out / "data" / n).is_file() for n in task0[:2]), 60)
    on_cluster.run(["scancel", f"{prepare}_0"])

    stages = _settled(out)
    assert stages["prepare"].state == "failed" and "task(s) 0 failed" in stages["prepare"].detail
    assert all(stages[s].state == "cancelled" for s in ("check", "train", "evaluate", "export"))
    code, text = _status(capsys, out)
    assert code == 1 and "the chain stopped at prepare" in text

    (out / "data" / task0[2]).unlink()
    before = _files(out / "data")
    assert set(before) == set(names) - set(task0[2:])  # the other tasks finished
    assert chain_commands.main(["submit", str(download), str(out), *ARGS]) == 0
    assert json.loads((out / st.STATE).read_text())["jobs"]["prepare"]["tasks"] == [0]
    stages = _settled(out)
    assert {s.state for s in stages.values()} == {"done"}, stages
    assert {n: v for n, v in _files(out / "data").items() if n in before} == before  # none converted twice
    marker = st.read_marker(out / "jobs/markers/prepare.0.json")
    assert marker["written_names"] == task0[2:] and marker["kept"] == 2

    _check_weights(out)
    report = (out / "report" / "reports" / "jobchain" / "README.md").read_text()
    # the run's learning curves, read from the TensorBoard events of the run folder the report keeps
    assert "## Learning curves" in report and (out / "report/reports/jobchain/learning_curves.png").is_file()
    code, text = _status(capsys, out)
    assert code == 0 and "best top-1" in text


def _check_weights(out: Path) -> None:
    """The exported state dict loads strictly into torchvision's model and scores the evaluated top-1."""
    card = json.loads((out / "export" / "model_card.json").read_text())
    assert set(card["evaluations"]) == {"best", "ema"} and card["epochs"] == 2
    model = torchvision.models.get_model(ARCH, num_classes=3)
    model.load_state_dict(torch.load(out / "export" / "model.pth", weights_only=True), strict=True)
    model.eval()
    tf = transforms.Compose([transforms.Resize(37), transforms.CenterCrop(32), transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    _, index = sources.load_index(str(out / "data"))
    val = index["val"]
    images = torch.stack([tf(Image.open(io.BytesIO(val.read(i))).convert("RGB")) for i in range(len(val))])
    labels = torch.tensor([val.target(i) for i in range(len(val))])
    with torch.no_grad():
        top1 = 100.0 * float((model(images).argmax(1) == labels).float().mean())
    assert top1 == pytest.approx(card["evaluations"]["best"]["val_top1"])


def test_failed_training_stops_the_chain(on_cluster, download, tmp_path, capsys):
    out = tmp_path / "out"
    args = [a if a != ARCH else "no_such_net" for a in ARGS]
    assert chain_commands.main(["submit", str(download), str(out), *args]) == 0
    stages = _settled(out)
    assert [stages[s].state for s in ("plan", "prepare", "check")] == ["done"] * 3
    assert stages["train"].state == "failed" and "unknown model" in stages["train"].detail
    assert stages["evaluate"].state == "cancelled" and stages["export"].state == "cancelled"
    code, text = _status(capsys, out)
    assert code == 1 and "the chain stopped at train: error: unknown model" in text
    assert not (out / "export").exists()


def test_bad_input_is_refused_before_submitting(download, tmp_path, capsys):
    assert chain_commands.main(["submit", str(tmp_path / "nowhere"), str(tmp_path / "out"), *ARGS]) == 2
    assert "does not exist" in capsys.readouterr().err
    # not the published sizes
    assert chain_commands.main(["submit", str(download), str(tmp_path / "out"), *ARGS[1:]]) == 2
    assert "not the published" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_cancel_stops_the_chain(on_cluster, download, tmp_path, capsys):
    out = tmp_path / "out"
    assert chain_commands.main(["submit", str(download), str(out), *ARGS]) == 0
    ids = [job["id"] for job in json.loads((out / st.STATE).read_text())["jobs"].values()]
    assert chain_commands.main(["cancel", str(out)]) == 0
    stages = _settled(out)
    assert {s.state for s in stages.values()} <= {"done", "cancelled"} and stages["report"].state == "cancelled"
    left = on_cluster.run(["squeue", "-h", "-o", "%i %T"]).stdout.split("\n")
    assert not [line for line in left if line.split(" ")[0] in ids and "PENDING" in line]
    code, text = _status(capsys, out)
    assert code == 0 and "by `python -m hpc_imagenet.slurm.jobchain cancel`" in text
