"""Staging on the test cluster: the committed slurm/ddp_2node_staged.sh, submitted with the sbatch
command a user types (--export for the tiny data and CPU settings), stages a shard folder
(hpc_imagenet.imagenet.data.shards) to each node's own folder, is requeued by the time-limit signal, resumes exactly,
and the second run
reuses both nodes' copies instead of copying again.

The test nodes share this machine's filesystem, so "node-local" is a folder per node:
STAGE_DIR='.../$SLURMD_NODENAME', expanded by each training process on its own node, as
'$TMPDIR' is on a real cluster."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict

import pytest

from hpc_imagenet.imagenet.data import demo, shards
from hpc_imagenet.imagenet.data.staging import MARKER, destination
from hpc_imagenet.slurm.generate import EXAMPLES, GenerateError, render, spec_from_args
from hpc_imagenet.slurm.localcluster.scenarios.jobs import ARCH, EPOCHS, release_requeued, run_states, wait_for_progress
from tests.cluster.requeue import assert_resumed_exactly
from tests.helpers import eval_settings
from hpc_imagenet.slurm.localcluster import SlurmCluster

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "slurm" / "ddp_2node_staged.sh"
NODES = ("node1", "node2")


def test_generated_stage_dir_stays_unexpanded_and_is_overridable() -> None:
    text = render(spec_from_args(EXAMPLES["ddp_2node_staged"]))
    assert 'TRAIN_ARGS+=(--stage-dir "$STAGE_DIR")' in text
    assert eval_settings(text, ["STAGE_DIR"], {"TMPDIR": "/batch-node-tmp"}) == ["$TMPDIR"]
    assert eval_settings(text, ["STAGE_DIR"], {"STAGE_DIR": "/local/$SLURMD_NODENAME"}) == ["/local/$SLURMD_NODENAME"]
    assert "STAGE_DIR" not in render(spec_from_args(EXAMPLES["ddp_4node"]))


@pytest.mark.parametrize("argv, words", [(["--", "--stage-dir", "/x"], "use --stage-dir"),
                                         (["--env", "STAGE_DIR=/x"], "--env 'STAGE_DIR'"),
                                         (["--stage-dir", "/a\nb"], "newline")])
def test_generator_refuses_stage_dir_elsewhere(argv, words) -> None:
    with pytest.raises(GenerateError, match=words):
        render(spec_from_args(argv))


def _markers(stage: Path, data: Path) -> Dict[str, int]:
    """mtime of each node's completion marker (absent: not staged there)."""
    paths = {node: destination(str(data), stage / node) / MARKER for node in NODES}
    return {node: p.stat().st_mtime_ns for node, p in paths.items() if p.exists()}


@pytest.mark.slurm
def test_two_nodes_stage_once_requeue_and_resume_from_their_copies(slurm_cluster: SlurmCluster,
                                                                   tmp_path: Path) -> None:
    # 192 images: 6 steps per epoch for 2 nodes x 2 processes of batch 8, packed in a few shards (2 GPUs a
    # node at submission, not the file's 4: enough to show one copier among a node's processes)
    folder = demo.generate(tmp_path / "folder", classes=4, train_per_class=48, val_per_class=2, size=(40, 32))
    data = tmp_path / "imagenet"
    shards.convert(str(folder), str(data), shard_mb=0.1)
    stage, run_dir = tmp_path / "local", tmp_path / "run"
    export = ",".join([f"ALL,DATA={data}", f"STAGE_DIR={stage}/$SLURMD_NODENAME", f"LOG_DIR={run_dir}",
                       f"VENV={REPO / '.venv'}", f"ARCH={ARCH}", f"EPOCHS={EPOCHS}", "BATCH_SIZE=8", "WORKERS=0",
                       "OMP_NUM_THREADS=1",
                       "EXTRA_ARGS=--image-size 32 --val-steps 1 --dist-backend gloo --seed 0 -p 1"])
    job = slurm_cluster.run(["sbatch", "--parsable", "--gpus-per-node=2", f"--output={tmp_path}/%x-%j.out",
                             f"--export={export}", str(SCRIPT)], cwd=REPO).stdout.strip()
    log_path = tmp_path / f"ddp_2node_staged-{job}.out"
    log = lambda: log_path.read_text() if log_path.exists() else ""  # noqa: E731

    wait_for_progress(log, 1, 2, timeout=300)
    first = _markers(stage, data)
    assert set(first) == set(NODES), f"each node stages its own copy: {first}\n{log()[-3000:]}"
    slurm_cluster.run(["scancel", "--batch", "--signal=USR2", job])  # what --signal=B:USR2@T does
    release_requeued(slurm_cluster, job)
    row = slurm_cluster.wait_finished(job, timeout=300, runs=2)
    text = log()
    assert row["State"] == "COMPLETED", f"{row}\n{text[-3000:]}"
    assert run_states(slurm_cluster, job) == ["REQUEUED", "COMPLETED"]
    assert_resumed_exactly(run_dir, text)

    runs = re.split(r"^job \d+ .* restart 1:", text, maxsplit=1, flags=re.M)
    assert len(runs) == 2, text[-3000:]
    files = sum(1 for p in data.rglob("*") if p.is_file())
    for node in NODES:  # one copier per node in the first run; the requeued run copies nothing
        assert runs[0].count(f"=> {node}: staged {files} of {files} files") == 1, runs[0][-3000:]
        assert f"=> {node}: reusing the complete staged copy" not in runs[0]
        assert runs[1].count(f"=> {node}: reusing the complete staged copy") == 1, runs[1][-3000:]
        assert f"=> {node}: staged" not in runs[1]
    assert _markers(stage, data) == first, "a staged copy was rewritten by the second run"
    record = json.loads((run_dir / "run.json").read_text())
    assert record["data_root"] == str(destination(str(data), stage / "node1")), "rank 0 reads node1's copy"
