"""A batch file written by the installed `hpc-imagenet-sbatch`, in a folder with no checkout, trains on the test
cluster: the package pip-installed from its wheel into a venv of its own (tests/installed.py), the file generated
and submitted from an empty folder, the job running `python -m hpc_imagenet.imagenet` from that environment."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from hpc_imagenet.slurm.localcluster import SlurmCluster
from hpc_imagenet.slurm.localcluster.scenarios.jobs import ARCH

pytestmark = pytest.mark.slurm


def test_a_batch_file_from_an_install_trains_without_a_checkout(slurm_cluster: SlurmCluster, installed_python: Path,
                                                                jpeg_data, tmp_path: Path) -> None:
    work = tmp_path / "work"  # where a user stands on the login node: no checkout here or above
    work.mkdir()
    sbatch = installed_python.parent / "hpc-imagenet-sbatch"
    generated = subprocess.run(
        [str(sbatch), "--name", "installed", "--nodes", "2", "--gpus-per-node", "0", "--cpus-per-task", "1",
         "--time", "10", "--python", str(installed_python), "--data", str(jpeg_data), "--arch", ARCH,
         "--epochs", "1", "--batch-size", "8", "--workers", "0",
         "--", "--image-size", "32", "--steps-per-epoch", "3", "--val-steps", "2", "--dist-backend", "gloo",
         "--seed", "0"], cwd=work, capture_output=True, text=True, timeout=120)
    assert generated.returncode == 0, generated.stderr
    script = work / "installed.sh"
    script.write_text(generated.stdout)
    assert "imagenet/imagenet_" not in generated.stdout and "-m hpc_imagenet.imagenet --variant ddp" in generated.stdout
    env = {**slurm_cluster.env, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["sbatch", "--wait", "--parsable", str(script)], cwd=work, env=env, capture_output=True,
                          text=True, timeout=300)
    job_id = done.stdout.strip().split(";")[0]
    log = next(work.glob(f"installed-{job_id}.out"), None)
    assert done.returncode == 0, f"{done.stderr}\n{log.read_text()[-3000:] if log else '(no output file)'}"
    record = json.loads((work / "runs" / f"installed-{job_id}" / "run.json").read_text())
    assert record["status"] == "finished" and record["dist"]["world_size"] == 2 and record["dist"]["nodes"] == 2
    site = installed_python.parent.parent / "lib"
    assert not list(site.rglob("run.json")) and not list(site.rglob("*.out"))
