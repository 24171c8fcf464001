"""Running the generated batch file's training inside a container image (``--container IMAGE``): how each
runtime wraps a job step on a real multi-node cluster, which one the login node has, and the checks made
before anything is submitted.

Every runtime here runs the training processes of one job step in the image, started by the step's own
launcher (srun, or the site's mpirun outside the image for Apptainer's hybrid model), with the host's network
(so NCCL finds the InfiniBand devices and the rendezvous address). The batch script itself runs on the host:
its trap still receives SLURM's time-limit signal and forwards it to the step's processes (scancel --signal).
What each runtime needs, from its own documentation (the unit tests cite each point):

- Apptainer / SingularityCE: a SIF built once (``apptainer pull``/``build``), never ``docker://`` on the
  compute nodes (every node converting into one shared cache at once races); ``exec --cleanenv`` so that a
  host ``PYTHONPATH`` from ``module load`` stays out, and the job's variables passed in explicitly with the
  ``APPTAINERENV_`` prefix, which ``--cleanenv`` keeps (``--env`` splits values at commas, which
  ``CUDA_VISIBLE_DEVICES=0,1,2,3`` has); ``--nv`` for the GPUs, ``--bind`` SRC at the same path (Apptainer
  makes the mount points). apptainer.org/docs/user/main: environment_and_metadata, gpu, bind_paths_and_mounts,
  mpi.
- Pyxis / enroot: ``--container-image`` (a registry as ``REGISTRY#IMAGE:TAG``; a squashfs file only as a path
  with ``/`` or ``./``), ``--container-name`` so that the image is imported once per node and job and the
  restart loop and the requeue reuse it (an import of an NGC image takes minutes and fills the disk when
  repeated: Pyxis issues 24 and 53), ``--container-env`` for the job's variables (the image's values win
  otherwise), ``--no-container-mount-home``; enroot mounts a fresh tmpfs on ``/tmp`` (RAM, gone after each
  step), so staging needs a mounted disk folder. github.com/NVIDIA/pyxis README and wiki; enroot
  ``conf/mounts/10-system.fstab``.
- Podman-HPC (NERSC): an image pulled or migrated beforehand (``podman-hpc pull``/``migrate``: a squashed
  copy the compute nodes read), checked with ``podman-hpc images`` before the loop; ``--gpu`` and ``--nccl``
  on GPU nodes, ``--openmpi-pmix`` under ``srun --mpi=pmix``; ``shared-run`` (one container a node, each task
  an exec in it) where a node runs several tasks; the job's variables with ``-e NAME`` (``--env-host`` would
  put the host's PATH over the image's). docs.nersc.gov/development/containers/podman-hpc/, the package's
  ``modules.d``.
- Charliecloud: ch-run mounts an image read-only and binds only onto folders the image has (ch-run(1), ``-b``:
  "With a read-only image (the default), DST must exist"; "Most images do have ten directories /mnt/[0-9]
  already available as mount points"). So the checkout goes to ``/mnt/0``, the data to ``/mnt/1``, the run
  folder to ``/mnt/2`` and further mounts to ``/mnt/3``...; the training is given those paths. ``--set-env``
  applies the image's ``/ch/environment``; ch-run unsets ``TMPDIR`` and binds the host's ``$TMPDIR`` (or
  ``/tmp``) at ``/tmp``, so ``--set-env TMPDIR=/tmp`` gives staging that same node-local folder back.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Dict, List, Optional, Sequence, Tuple

from hpc_imagenet import requeue

RUNTIMES = ("apptainer", "singularity", "pyxis", "podman-hpc", "charliecloud")
# the command each runtime needs on the login node (Pyxis is a plugin of srun: asked through srun --help)
COMMANDS = {"apptainer": "apptainer", "singularity": "singularity", "podman-hpc": "podman-hpc",
            "charliecloud": "ch-run", "pyxis": "srun"}
# the variables the batch file exports for the training (rendezvous, run folder, start budget, threads)
JOB_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "LOG_DIR", "STARTS_LOG", "ALLOCATION", "MAX_RESTARTS", "MAX_STARTS",
                 "LAUNCH", "BUDGET_FUNCTIONS")
# set per task by the launcher (srun, mpirun) and read by the training's environment detection
TASK_PREFIXES = ("SLURM_", "SLURMD_", "OMPI_", "PMIX_", "PMI_")
# Charliecloud's mount points, which most images have (ch-run(1)); the first three are the generator's
CH_MOUNTS = tuple(f"/mnt/{n}" for n in range(10))
CH_REPO, CH_DATA, CH_RUN = CH_MOUNTS[:3]
# the requeue contract's variables that name those folders
CH_PATHS = {requeue.RUN_DIR_ENV: CH_RUN, requeue.DATA_ENV: CH_DATA}


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


def _as_path(image: str) -> bool:
    return image.startswith(("/", "./", "../", "~"))


def _qualified(image: str) -> bool:
    """REGISTRY/NAME:TAG as podman lists it (the registry a host name, or localhost)."""
    first, _, rest = image.partition("/")
    return bool(rest) and ("." in first or ":" in first or first == "localhost") and ":" in rest


def image_refusal(runtime: str, image: str) -> Optional[str]:
    """Why RUNTIME cannot read IMAGE on the compute nodes (None: it can), with the fix."""
    if runtime in ("apptainer", "singularity"):
        if "://" in image or "#" in image or not (_as_path(image) or image.endswith((".sif", ".img"))):
            return (f"--container {image}: {runtime} should run a SIF built once, not convert a registry image on "
                    f"every node at once; build it on the login node ({runtime} pull pytorch-25.01.sif "
                    "docker://nvcr.io/nvidia/pytorch:25.01-py3) and give its path")
    elif runtime == "pyxis":
        if "://" in image or image.endswith(".sif"):
            return (f"--container {image}: Pyxis reads a registry image as REGISTRY#IMAGE:TAG "
                    "(nvcr.io#nvidia/pytorch:25.01-py3) or a squashfs file by its path (enroot import)")
        if image.endswith((".sqsh", ".squashfs")) and not _as_path(image):
            return f"--container {image}: Pyxis reads a squashfs file only as a path: give it as ./{image}"
        if not _as_path(image) and "#" not in image and "." in image.split("/")[0] and "/" in image:
            registry, _, name = image.partition("/")
            return f"--container {image}: Pyxis spells a registry image {registry}#{name} (enroot's REGISTRY#IMAGE)"
    elif runtime == "podman-hpc":
        if looks_local(image) or "#" in image or "://" in image or not _qualified(image):
            return (f"--container {image}: podman-hpc runs an image pulled and migrated beforehand, named as "
                    "podman-hpc images lists it (REGISTRY/NAME:TAG, e.g. nvcr.io/nvidia/pytorch:25.01-py3 after "
                    "podman-hpc pull)")
    elif runtime == "charliecloud" and not (_as_path(image) or image.endswith((".sqsh", ".squashfs"))):
        return (f"--container {image}: ch-run runs a directory or SquashFS image by its path; convert it once "
                f"(ch-convert nvcr.io/nvidia/pytorch:25.01-py3 /shared/pytorch-25.01.sqsh) and give that path")
    return None


def check(runtime: str, image: str, mounts: Sequence[str], data: str, stage_dir: Optional[str], launcher: str,
          mpi_starter: str, which=shutil.which, here: bool = True) -> None:
    """ContainerError for a setting that would fail on the cluster: the runtime missing here (HERE: the file is
    generated on the login node it will run from; the committed examples are not), an image the runtime cannot
    read or a local one that is not there, a folder the job reads that no mount brings in, a staging folder that
    would not be node-local disk inside the image, a launcher the runtime cannot wrap."""
    if runtime not in RUNTIMES:
        raise ContainerError(f"--container-runtime {runtime} is not known; use one of {', '.join(RUNTIMES)}")
    refusal = image_refusal(runtime, image)
    if refusal:
        raise ContainerError(refusal)
    if here:
        _check_present(runtime, which)
    if here and looks_local(image) and not os.path.exists(os.path.expanduser(image)):
        raise ContainerError(f"--container {image} does not exist; build or pull the image first (docs/slurm.md: "
                             "Containers) or give a registry reference")
    if launcher == "mpi" and mpi_starter == "mpirun" and runtime in ("pyxis", "podman-hpc"):
        raise ContainerError(f"{runtime} starts containers through srun only: use --mpi-starter srun "
                             "(srun --mpi=pmix) with --launcher mpi")
    if runtime == "charliecloud":
        _check_charliecloud(mounts, stage_dir)
        return
    for label, path in (("DATA", data), ("--stage-dir", stage_dir)):
        if path and path.startswith("$"):
            raise ContainerError(f"--stage-dir {path}: the variable names a host folder that {runtime} does not "
                                 f"mount{' (enroot puts a RAM tmpfs on /tmp)' if runtime == 'pyxis' else ''}; "
                                 "stage on node-local disk mounted into the image: --container-mounts /local/disk "
                                 "--stage-dir /local/disk/imagenet")
        if path and not _mounted(path, mounts):
            raise ContainerError(f"{label} {path} is not under any --container-mounts folder (nor the checkout), so "
                                 f"the image would not see it; add --container-mounts {path}")


def _check_charliecloud(mounts: Sequence[str], stage_dir: Optional[str]) -> None:
    """ch-run binds onto /mnt/N; the data and run folders are bound by the file, staging goes to ch-run's /tmp."""
    if stage_dir and stage_dir != "$TMPDIR":
        raise ContainerError(f"--stage-dir {stage_dir}: under Charliecloud stage into '$TMPDIR' (ch-run binds the "
                             "host's $TMPDIR, else /tmp, at the image's /tmp, real node-local disk)")
    plain = [m for m in mounts if ":" not in m]
    if len(plain) > len(CH_MOUNTS) - 3:
        raise ContainerError(f"--container-mounts: ch-run has {len(CH_MOUNTS) - 3} free mount points "
                             f"(/mnt/3../mnt/9) for {len(plain)} folders; give some as SRC:DST onto a folder the "
                             "image has")


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


def _passed(names: Sequence[str]) -> List[str]:
    """The variables a clean container environment must receive: the job's, then the extra ones (--env)."""
    return list(dict.fromkeys([*JOB_VARIABLES, *names]))


def wrap(runtime: str, launcher: str, gpus: bool, names: Sequence[str] = ()) -> Tuple[str, str]:
    """(srun's extra flags, the command before the program) that run a job step's program in $CONTAINER_IMAGE
    with the job's variables (NAMES: those the file exports besides JOB_VARIABLES) and the mounts of settings()."""
    passed = _passed(names)
    if runtime == "pyxis":
        return ('--container-image="$CONTAINER_IMAGE" --container-name="$CONTAINER_NAME" '
                '--container-mounts="$CONTAINER_MOUNTS" --container-workdir="$PWD" --no-container-mount-home '
                f'--container-env={",".join(passed)}', "")
    if runtime in ("apptainer", "singularity"):
        prefix = "APPTAINERENV_" if runtime == "apptainer" else "SINGULARITYENV_"
        patterns = "|".join([*(p + "*" for p in TASK_PREFIXES), "CUDA_VISIBLE_DEVICES", "TMPDIR", *passed])
        # each task exports its own values with the prefix (srun sets SLURM_PROCID per task), then execs
        pass_env = f'for v in $(compgen -e); do case $v in {patterns}) export "{prefix}$v=${{!v}}";; esac; done; ' \
                   'exec "$@"'
        return "", (f"bash -c '{pass_env}' {runtime}-env {runtime} exec --cleanenv{' --nv' if gpus else ''} "
                    '--bind "$CONTAINER_MOUNTS" --pwd "$PWD" "$CONTAINER_IMAGE"')
    if runtime == "podman-hpc":
        shared = launcher in ("srun", "mpi")  # several tasks a node: one container, each task an exec in it
        flags = ["shared-run" if shared else "run --rm", *(["--gpu", "--nccl"] if gpus else []),
                 *(["--openmpi-pmix"] if launcher == "mpi" else []), "--net host --ipc host",
                 *(f"-e '{p}*'" for p in TASK_PREFIXES[:2]), *(["-e CUDA_VISIBLE_DEVICES"] if gpus else []),
                 *(f"-e {name}" for name in passed)]
        return "", f'podman-hpc {" ".join(flags)} "${{CONTAINER_VOLUMES[@]}}" -w "$PWD" "$CONTAINER_IMAGE"'
    sets = [f"--set-env=LOG_DIR={CH_RUN}", f"--set-env=STARTS_LOG={CH_RUN}/starts.log", "--set-env=TMPDIR=/tmp"]
    # a user's script learns the run folder and the data from the requeue contract's variables: their image paths
    sets += [f"--set-env={name}={CH_PATHS[name]}" for name in names if name in CH_PATHS]
    return "", f'ch-run --set-env {" ".join(sets)} "${{CONTAINER_BINDS[@]}}" -c {CH_REPO} "$CONTAINER_IMAGE" --'


def image_paths(runtime: Optional[str]) -> Dict[str, str]:
    """The training's arguments that name host folders, as the image sees them (Charliecloud's /mnt/N)."""
    return {'"$DATA"': CH_DATA, '"$LOG_DIR"': CH_RUN} if runtime == "charliecloud" else {}


def settings(runtime: str, image: str, mounts: Sequence[str], data: bool = True) -> List[str]:
    """The batch file's lines that name the image and the mounts (overridable at submit time, as every setting);
    DATA: the job has a DATA folder to mount (a user's script may have none)."""
    lines = [f"CONTAINER_IMAGE=${{CONTAINER_IMAGE:-{image}}}  # {runtime}"]
    if runtime == "charliecloud":
        return lines + _charliecloud_settings(mounts, data)
    default = ",".join(["$REPO", *mounts])
    lines.append(f'CONTAINER_MOUNTS=${{CONTAINER_MOUNTS:-"{default}"}}  # SRC[:DST],... (the checkout first)')
    if runtime == "pyxis":
        lines.append('CONTAINER_NAME=${CONTAINER_NAME:-hpc-imagenet-$SLURM_JOB_ID}  # imported once per node and '
                     "job, reused by every step and after a requeue")
    if runtime == "podman-hpc":  # one flag per mount; SRC alone at the same path (podman would make a volume of it)
        lines += [_user("podman-hpc"), "CONTAINER_VOLUMES=()", 'IFS=, read -ra mounts <<< "$CONTAINER_MOUNTS"',
                  'for mount in "${mounts[@]}"; do [[ $mount == *:* ]] || mount=$mount:$mount; '
                  'CONTAINER_VOLUMES+=(-v "$mount"); done']
    return lines


def _user(command: str) -> str:
    """ch-run, and podman-hpc (its site configuration reads $USER where os.getlogin() fails, as without a
    terminal: podman_hpc/siteconfig.py), will not start without $USER."""
    return f'export USER="${{USER:-$(id -un)}}"  # {command} will not start without $USER'


def _charliecloud_settings(mounts: Sequence[str], data: bool) -> List[str]:
    plain = ",".join(mounts)
    binds = f'-b "$REPO:{CH_REPO}" ' + (f'-b "$DATA:{CH_DATA}" ' if data else "") + f'-b "$RUN_FOLDER:{CH_RUN}"'
    return [f'CONTAINER_MOUNTS=${{CONTAINER_MOUNTS:-"{plain}"}}  # SRC[:DST],... besides the checkout, the data and '
            f"the run folder ({CH_REPO}, {CH_DATA}, {CH_RUN}); SRC alone goes to /mnt/3..",
            _user("ch-run"),
            # a read-only image has no host folders: bind onto the mount points it has (ch-run(1), -b)
            'RUN_FOLDER=$LOG_DIR; [[ $RUN_FOLDER == /* ]] || RUN_FOLDER=$REPO/$LOG_DIR  # made before the first start',
            f"CONTAINER_BINDS=({binds})",
            'IFS=, read -ra mounts <<< "$CONTAINER_MOUNTS"', "point=3",
            'for mount in "${mounts[@]}"; do [[ $mount == *:* ]] || { mount=$mount:/mnt/$point; point=$((point + 1)); '
            '}; CONTAINER_BINDS+=(-b "$mount"); done']


def preflight(runtime: str) -> List[str]:
    """Lines the batch file runs on the first node before the loop: what the runtime needs there."""
    if runtime == "podman-hpc":
        # a compute node sees only migrated (squashed) images: podman-hpc images lists them
        return ["podman-hpc images --format '{{.Repository}}:{{.Tag}}' | grep -qxF \"$CONTAINER_IMAGE\" || "
                '{ echo "error: $CONTAINER_IMAGE is not among the images this node sees (podman-hpc images): run '
                'podman-hpc pull $CONTAINER_IMAGE (or podman-hpc migrate) on a login node first" >&2; exit 2; }']
    return []
