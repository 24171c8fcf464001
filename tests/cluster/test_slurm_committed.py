"""Every committed batch file (slurm/*.sh) trains on the test cluster, unedited, through its
``sbatch --export`` settings alone: the cluster has no ``module`` command (``MODULES=`` skips the
module loads that slurm/mpi_4node.sh would do), no GPUs (gloo on CPU) and no ImageNet (a tiny JPEG
folder, one step an epoch).

The allocation is shrunk on sbatch's command line, not in the file (``--nodes=1 --cpus-per-task=1
--gpus-per-node=1``, which override the ``#SBATCH`` lines, as a user may; the cluster's GPUs are
stand-ins the CPU trainers never use): the files then run side by side in about a minute instead of
one after another (the 4-node files take the whole cluster). The scripts size every launch from
the allocation (one process per allocated GPU), so they run unchanged; trainings across nodes are
test_slurm_jobs.py's.

Make test leaves two files to make test-long (tests/conftest.py), whose paths it runs elsewhere: the Charliecloud
one (test_slurm_container.py's job, preempted and resumed in the image) and the Lightning one
(test_slurm_own_script.py's job); only the selected files are submitted.

What it proves is that nothing in a file needs a hand edit on such a site: the settings reach the
trainer, the launchers start, the start budget and the requeue trap are valid bash on real SLURM."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Tuple

import pytest

from hpc_imagenet.slurm.localcluster import SlurmCluster
from hpc_imagenet.slurm.localcluster.scenarios.jobs import ARCH
from tests.cluster.scenarios import selected_ids
from tests.helpers import REPO, container_exports, read_run

pytestmark = pytest.mark.slurm
# Apptainer and Pyxis cannot run on this cluster (no setuid runtime, no enroot plugin in Debian's SLURM): their
# files are held to their runtimes' documented command lines by tests/unit/test_slurm_containers.py instead. The
# Charliecloud file runs here, in the test cluster's image; the Podman-HPC one needs an image migrated first
# (docs/slurm.md, "Containers").
NOT_HERE = {"ddp_4node_apptainer", "ddp_4node_pyxis", "ddp_4node_podman_hpc"}
COMMITTED = sorted(p for p in (REPO / "slurm").glob("*.sh") if p.stem not in NOT_HERE)
TINY = "--image-size 32 --steps-per-epoch 1 --val-steps 1 --dist-backend gloo -p 1"
OWN_TINY = "--steps 3 --batch-size 4 --print-every 1"  # the example scripts' own flags (launch/examples/)


def _own(path: Path) -> bool:
    """A file that runs a user's own script (--script), not the engine."""
    return "SCRIPT=${SCRIPT:-" in path.read_text()


def _settings(request: pytest.FixtureRequest, path: Path, data: Path, tmp: Path) -> str:
    settings = ["ALL", "MODULES=", f"LOG_DIR={tmp / ('run-' + path.stem)}", f"DATA={data}", f"ARCH={ARCH}",
                "EPOCHS=1", "BATCH_SIZE=4", "WORKERS=0", f"EXTRA_ARGS={OWN_TINY if _own(path) else TINY}",
                "OMP_NUM_THREADS=1",
                "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"]  # mpirun refuses root without them
    if "STAGE_DIR=" in path.read_text():
        settings.append(f"STAGE_DIR={tmp / 'stage'}")  # the file's default, $TMPDIR, is not set here
    if "ch-run" in path.read_text():
        # the light test image (the file binds the data and the run folder itself)
        settings += container_exports(request.getfixturevalue("container_image"))  # made only if a file needs it
    return ",".join(settings)


@pytest.fixture(scope="module")
def submitted(request: pytest.FixtureRequest, slurm_cluster: SlurmCluster, data: Path,
              tmp_path_factory) -> Tuple[Path, Dict[str, str]]:
    """(the folder of the logs and run folders, name -> job id): every selected committed file submitted with
    sbatch and --export only."""
    tmp = tmp_path_factory.mktemp("committed")
    selected = selected_ids(request, "test_committed_file_trains_through_its_export_settings")
    jobs = {}
    for path in COMMITTED:
        if path.name not in selected:
            continue
        jobs[path.stem] = slurm_cluster.run(
            ["sbatch", "--parsable", "--time=10", "--nodes=1", "--cpus-per-task=1", "--gpus-per-node=1",
             f"--output={tmp / '%x-%j.out'}",
             "--export", _settings(request, path, data, tmp), str(path)], cwd=REPO).stdout.strip()
    yield tmp, jobs
    slurm_cluster.run(["scancel", *jobs.values()], check=False)


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_committed_file_trains_through_its_export_settings(slurm_cluster: SlurmCluster,
                                                           submitted: Tuple[Path, Dict[str, str]], path: Path) -> None:
    tmp, jobs = submitted
    job_id = jobs[path.stem]
    row = slurm_cluster.wait_finished(job_id, timeout=420)
    log_path = tmp / f"{path.stem}-{job_id}.out"
    log = log_path.read_text() if log_path.exists() else "(no log)"
    assert row["State"] == "COMPLETED", f"{row}\n{log[-3000:]}"
    assert "command not found" not in log, log[-3000:]
    if _own(path):  # the example script's own end: its last step, run under the requeue runner
        assert "step 3/3" in log and "training exited with status 0" in log, log[-3000:]
        return
    record = read_run(tmp / f"run-{path.stem}")
    assert record["status"] == "finished" and [e["epoch"] for e in record["epochs"]] == [0], record["status"]
    assert record["dist"]["world_size"] == 1, "one process per allocated GPU (--gpus-per-node=1), not the file's 4"
