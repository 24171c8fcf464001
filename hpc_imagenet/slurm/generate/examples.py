"""The committed example batch files (slurm/*.sh): the generator options of each, and the NGC image
each container runtime reads. ``python -m hpc_imagenet.slurm.generate --write-examples`` rewrites them;
tests/unit/test_slurm_generate.py fails when one differs from what its options give."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

from hpc_imagenet.slurm.generate.options import spec_from_args
from hpc_imagenet.slurm.generate.renderer import render


# NVIDIA's NGC PyTorch 25.01 (torch 2.6, Python 3.12: the oldest torch the project supports), prepared once by the
# site as each runtime reads it (docs/slurm.md, "Containers")
NGC_IMAGE_APPTAINER = "/path/to/images/pytorch-25.01.sif"  # apptainer pull ... docker://nvcr.io/nvidia/pytorch:25.01-py3
NGC_IMAGE_PYXIS = "nvcr.io#nvidia/pytorch:25.01-py3"  # enroot's spelling: registry#image
NGC_IMAGE_CHARLIECLOUD = "/path/to/images/pytorch-25.01.sqsh"  # ch-convert nvcr.io/nvidia/pytorch:25.01-py3 FILE
NGC_IMAGE_PODMAN = "nvcr.io/nvidia/pytorch:25.01-py3"  # podman-hpc pull nvcr.io/nvidia/pytorch:25.01-py3
# The committed examples: name -> generator arguments. test_slurm_generate regenerates each one.
EXAMPLES: Dict[str, List[str]] = {
    "ddp_4node": ["--name", "ddp_4node", "--nodes", "4", "--gpus-per-node", "4", "--variant", "amp",
                  "--launcher", "torchrun", "--venv", ".venv", "--env", "NCCL_DEBUG=WARN",
                  "--", "--opt-level", "O1", "--channels-last"],
    "ddp_1node": ["--name", "ddp_1node", "--nodes", "1", "--gpus-per-node", "4", "--variant", "ddp",
                  "--launcher", "torchrun", "--venv", ".venv"],
    "nd_1gpu": ["--name", "nd_1gpu", "--gpus-per-node", "1", "--variant", "nd", "--batch-size", "64",
                "--venv", ".venv"],
    "dp_1node": ["--name", "dp_1node", "--gpus-per-node", "4", "--variant", "dp", "--venv", ".venv"],
    "ddp_apex_2node": ["--name", "ddp_apex_2node", "--nodes", "2", "--gpus-per-node", "4", "--variant", "amp",
                       "--launcher", "launch", "--batch-size", "208", "--workers", "20", "--venv", ".venv",
                       "--", "--opt-level", "O2", "--desired-acc", "0.75"],
    "mpi_4node": ["--name", "mpi_4node", "--nodes", "4", "--gpus-per-node", "4", "--variant", "ddp",
                  "--launcher", "mpi", "--module", "openmpi", "--venv", ".venv", "--env", "NCCL_DEBUG=WARN"],
    "ddp_2node_staged": ["--name", "ddp_2node_staged", "--nodes", "2", "--gpus-per-node", "4", "--variant", "ddp",
                         "--launcher", "torchrun", "--venv", ".venv", "--stage-dir", "$TMPDIR"],
    # your own script under the same batch file (hpc_imagenet/requeue/): a plain DDP one under torchrun, a Lightning
    # one under srun (one task per process, as Lightning wants under SLURM)
    "own_ddp_2node": ["--script", "launch/examples/train_ddp.py", "--name", "own_ddp_2node", "--nodes", "2",
                      "--gpus-per-node", "4", "--launcher", "torchrun", "--venv", ".venv", "--", "--steps", "2000"],
    "own_lightning_2node": ["--script", "launch/examples/train_lightning.py", "--framework", "lightning", "--name",
                            "own_lightning_2node", "--nodes", "2", "--gpus-per-node", "4", "--launcher", "srun",
                            "--venv", ".venv", "--", "--steps", "2000"],
    # NVIDIA's NGC PyTorch image (PyTorch, NCCL, cuDNN and DALI built together), as each runtime runs it; the data
    # folder is mounted at the same path (Charliecloud: at /mnt/1, a mount point the read-only image has)
    "ddp_4node_apptainer": ["--name", "ddp_4node_apptainer", "--nodes", "4", "--gpus-per-node", "4", "--variant",
                            "amp", "--launcher", "torchrun", "--container", NGC_IMAGE_APPTAINER,
                            "--container-runtime", "apptainer", "--container-mounts", "/path/to/imagenet",
                            "--env", "NCCL_DEBUG=WARN", "--", "--opt-level", "O1", "--channels-last"],
    "ddp_4node_charliecloud": ["--name", "ddp_4node_charliecloud", "--nodes", "4", "--gpus-per-node", "4",
                               "--variant", "amp", "--launcher", "torchrun", "--container", NGC_IMAGE_CHARLIECLOUD,
                               "--container-runtime", "charliecloud", "--env", "NCCL_DEBUG=WARN",
                               "--", "--opt-level", "O1", "--channels-last"],
    "ddp_4node_pyxis": ["--name", "ddp_4node_pyxis", "--nodes", "4", "--gpus-per-node", "4", "--variant", "amp",
                        "--launcher", "torchrun", "--container", NGC_IMAGE_PYXIS, "--container-runtime", "pyxis",
                        "--container-mounts", "/path/to/imagenet", "--env", "NCCL_DEBUG=WARN",
                        "--", "--opt-level", "O1", "--channels-last"],
    "ddp_4node_podman_hpc": ["--name", "ddp_4node_podman_hpc", "--nodes", "4", "--gpus-per-node", "4", "--variant",
                             "amp", "--launcher", "torchrun", "--container", NGC_IMAGE_PODMAN, "--container-runtime",
                             "podman-hpc", "--container-mounts", "/path/to/imagenet", "--env", "NCCL_DEBUG=WARN",
                             "--", "--opt-level", "O1", "--channels-last"],
}
EXAMPLES_DIR = Path(__file__).resolve().parents[3] / "slurm"  # the checkout's slurm/


def render_example(name: str) -> str:
    return render(spec_from_args(EXAMPLES[name], on_login_node=False))
