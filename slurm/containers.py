"""Running the generated batch file's training inside a container image (``--container IMAGE``): how each
runtime wraps a job step, which one the login node has, and the checks made before anything is submitted.

Every runtime here runs the training processes of one job step in the image, started by the step's own
launcher (srun, or the site's mpirun outside the image for the mpi launcher), with the host's network (so
NCCL finds the InfiniBand devices and the rendezvous address) and the job's environment (``SLURM_*``,
``MASTER_ADDR``/``MASTER_PORT``, ``LOG_DIR``) passed in. What differs is the GPU flag, the bind-mount flag,
and whether the wrapping is a command before the program or flags of srun (Pyxis). The batch script itself
runs on the host: its trap still receives SLURM's time-limit signal and forwards it to the step's
processes (scancel --signal), which the runtimes deliver to the program inside.

Sources (each runtime's own documentation of multi-node GPU jobs):
- Apptainer / SingularityCE: ``apptainer exec --nv --bind SRC:DST IMAGE CMD`` (apptainer.org/docs/user/main/gpu.html,
  bind_paths_and_mounts.html, mpi.html: the hybrid model, the host's mpirun starting ``apptainer exec`` per rank).
- Pyxis / enroot: ``srun --container-image=IMAGE --container-mounts=SRC:DST --container-workdir=DIR CMD``
  (github.com/NVIDIA/pyxis README; GPUs through enroot's NVIDIA hook, the environment passed by default).
- Podman-HPC (NERSC): ``podman-hpc run --rm --gpu --net host -v SRC:DST -w DIR IMAGE CMD``
  (docs.nersc.gov/development/containers/podman-hpc/).
- Charliecloud: ``ch-run -b SRC:DST -c DIR IMAGE -- CMD`` on a directory or SquashFS image, GPUs injected into
  the image once with ``ch-fromhost --nvidia`` (hpc.github.io/charliecloud/ch-run.html, ch-fromhost.html).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Optional, Sequence, Tuple

RUNTIMES = ("apptainer", "singularity", "pyxis", "podman-hpc", "charliecloud")
# the command each runtime needs on the login node (Pyxis is a plugin of srun: asked through srun --help)
COMMANDS = {"apptainer": "apptainer", "singularity": "singularity", "podman-hpc": "podman-hpc",
            "charliecloud": "ch-run", "pyxis": "srun"}


class ContainerError(ValueError):
    """A container setting that cannot work; one line saying what to change."""


def detect(which=shutil.which) -> Optional[str]:
    """The runtime the login node has: the first of Apptainer, Singularity, Podman-HPC, Charliecloud on PATH,
    else Pyxis where srun knows --container-image; None where there is none."""
    for runtime in ("apptainer", "singularity", "podman-hpc", "charliecloud"):
        if which(COMMANDS[runtime]):
            return runtime
    return "pyxis" if _srun_has_pyxis(which) else None


def _srun_has_pyxis(which=shutil.which) -> bool:
    srun = which("srun")
    if not srun:
        return False
    try:
        return "--container-image" in subprocess.run([srun, "--help"], capture_output=True, text=True,
                                                     timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return False


def looks_local(image: str) -> bool:
    """Whether IMAGE names a file or folder on this filesystem (a .sif, a .sqsh, a directory image), which can be
    checked here, rather than a registry reference (docker://..., nvcr.io/nvidia/pytorch:25.01-py3), which cannot."""
    return image.startswith(("/", "./", "../", "~")) or image.endswith((".sif", ".sqsh", ".squashfs", ".img"))


def check(runtime: str, image: str, mounts: Sequence[str], data: str, stage_dir: Optional[str], launcher: str,
          mpi_starter: str, which=shutil.which, here: bool = True) -> None:
    """ContainerError for a setting that would fail on the cluster: the runtime missing here (HERE: the file is
    generated on the login node it will run from; the committed examples are not), a local image that is not
    there, a folder the job reads that no mount brings in, a launcher the runtime cannot wrap."""
    if runtime not in RUNTIMES:
        raise ContainerError(f"--container-runtime {runtime} is not known; use one of {', '.join(RUNTIMES)}")
    if here:
        _check_present(runtime, which)
    if here and looks_local(image) and not os.path.exists(os.path.expanduser(image)):
        raise ContainerError(f"--container {image} does not exist; build or pull the image first (docs/slurm.md: "
                             "Containers) or give a registry reference")
    if runtime == "pyxis" and launcher == "mpi" and mpi_starter == "mpirun":
        raise ContainerError("Pyxis starts containers through srun only: use --mpi-starter srun (srun --mpi=pmix) "
                             "with --launcher mpi")
    for label, path in (("DATA", data), ("--stage-dir", stage_dir)):
        if path and not path.startswith("$") and not _mounted(path, mounts):
            raise ContainerError(f"{label} {path} is not under any --container-mounts folder (nor the checkout), so "
                                 f"the image would not see it; add --container-mounts {path}")


def _check_present(runtime: str, which) -> None:
    """The runtime's command on this node (Pyxis: srun with --container-image)."""
    if runtime == "pyxis":
        if not _srun_has_pyxis(which):
            raise ContainerError("--container-runtime pyxis: this node's srun has no --container-image (the Pyxis "
                                 "plugin); generate on a login node of a cluster that has it, or pick another "
                                 "runtime")
    elif not which(COMMANDS[runtime]):
        raise ContainerError(f"--container-runtime {runtime}: {COMMANDS[runtime]} is not on this node's PATH; load "
                             f"it (module load {runtime}) or pick the runtime this cluster has")


def _mounted(path: str, mounts: Sequence[str]) -> bool:
    """Whether PATH lies under the checkout (a relative path: the job runs from it, and it is always mounted) or
    under the host side of one of MOUNTS (SRC or SRC:DST)."""
    if not os.path.isabs(path):
        return True
    path = os.path.normpath(path)
    return any(path == src or path.startswith(src.rstrip("/") + "/")
               for src in (os.path.normpath(m.split(":", 1)[0]) for m in mounts))


def wrap(runtime: str) -> Tuple[str, str]:
    """(srun's extra flags, the command before the program) that run a job step's program in the image named by
    $CONTAINER_IMAGE, with $CONTAINER_MOUNTS (SRC[:DST],...) mounted and the submit folder as working folder."""
    if runtime == "pyxis":
        return ('--container-image="$CONTAINER_IMAGE" --container-mounts="$CONTAINER_MOUNTS" '
                '--container-workdir="$PWD"', "")
    if runtime in ("apptainer", "singularity"):
        return "", f'{runtime} exec --nv --bind "$CONTAINER_MOUNTS" --pwd "$PWD" "$CONTAINER_IMAGE"'
    if runtime == "podman-hpc":
        return "", ('podman-hpc run --rm --gpu --net host --ipc host --env-host "${CONTAINER_VOLUMES[@]}" -w "$PWD" '
                    '"$CONTAINER_IMAGE"')
    return "", 'ch-run "${CONTAINER_BINDS[@]}" -c "$PWD" "$CONTAINER_IMAGE" --'


def settings(runtime: str, image: str, mounts: Sequence[str]) -> list:
    """The batch file's lines that name the image and the mounts (overridable at submit time, as every setting)."""
    default = ",".join(["$REPO", *mounts])
    lines = [f"CONTAINER_IMAGE=${{CONTAINER_IMAGE:-{image}}}  # {runtime}",
             f'CONTAINER_MOUNTS=${{CONTAINER_MOUNTS:-"{default}"}}  # SRC[:DST],... (the checkout first)']
    if runtime == "charliecloud":
        lines.append('export USER="${USER:-$(id -un)}"  # ch-run will not start without $USER')
    if runtime in ("podman-hpc", "charliecloud"):  # one flag per mount
        flag, name = ("-v", "CONTAINER_VOLUMES") if runtime == "podman-hpc" else ("-b", "CONTAINER_BINDS")
        lines += [f"{name}=()", 'IFS=, read -ra mounts <<< "$CONTAINER_MOUNTS"',
                  # SRC alone is mounted at the same path (podman would make an anonymous volume of it)
                  f'for mount in "${{mounts[@]}}"; do [[ $mount == *:* ]] || mount=$mount:$mount; '
                  f'{name}+=({flag} "$mount"); done']
    return lines
