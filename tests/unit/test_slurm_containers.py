"""Batch files that run in a container image: each runtime's wrapping as its own documentation gives it for a
multi-node job on a real cluster (cited per point), and the settings refused before anything is submitted. The
runtimes themselves are stand-ins here (an executable of the runtime's name on PATH): what is checked is the
text. Charliecloud's and Podman-HPC's files also run for real on the test cluster (tests/cluster/)."""
import subprocess

import pytest

from hpc_imagenet.slurm import generate


@pytest.fixture
def runtimes(tmp_path, monkeypatch):
    """Stand-ins for the runtimes' commands on PATH, and an image file and a data folder that exist."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("apptainer", "singularity", "podman-hpc", "ch-run"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").write_text("#!/bin/sh\necho '      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH'\n")
    for exe in bin_dir.iterdir():
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    (tmp_path / "data").mkdir()
    (tmp_path / "pt.sif").write_bytes(b"image")
    (tmp_path / "pt.sqsh").write_bytes(b"image")
    return tmp_path


IMAGES = {"apptainer": "pt.sif", "singularity": "pt.sif", "charliecloud": "pt.sqsh",
          "pyxis": "nvcr.io#nvidia/pytorch:25.01-py3", "podman-hpc": "nvcr.io/nvidia/pytorch:25.01-py3"}


def _script(tmp_path, runtime, *more, image=None, gpus="4"):
    default = IMAGES[runtime]
    image = image or (str(tmp_path / default) if default.startswith("pt.") else default)
    mounts = [] if runtime == "charliecloud" else ["--container-mounts", str(tmp_path)]
    argv = ["--nodes", "4", "--gpus-per-node", gpus, "--variant", "amp", "--data", str(tmp_path / "data"),
            "--container", image, "--container-runtime", runtime, *mounts, "--env", "NCCL_DEBUG=WARN", *more]
    text = generate.render(generate.spec_from_args(argv))
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0  # a script bash can read
    return text


def _launch_line(text):
    return next(line for line in text.splitlines() if line.lstrip().startswith(("srun ", '"$MPIRUN"')))


def _exports(text):
    """Every variable the file exports for the training (export NAME=..., export A B C)."""
    names = []
    for line in text.splitlines():
        if line.startswith("export ") and "USER=" not in line:
            rest = line[len("export "):]
            names += [rest.split("=", 1)[0]] if "=" in rest.split()[0] else rest.split()
    return names


# ---- Apptainer / SingularityCE


def test_apptainer_runs_a_sif_over_a_clean_environment_with_the_jobs_variables(runtimes):
    # apptainer.org/docs/user/main/environment_and_metadata.html: the host's variables pass in unless --cleanenv;
    # APPTAINERENV_NAME sets NAME in the container, also with --cleanenv (--env would split 0,1,2,3 at commas)
    text = _script(runtimes, "apptainer")
    line = _launch_line(text)
    assert f"CONTAINER_IMAGE=${{CONTAINER_IMAGE:-{runtimes}/pt.sif}}" in text
    assert ('apptainer-env apptainer exec --cleanenv --nv --bind "$CONTAINER_MOUNTS" --pwd "$PWD" "$CONTAINER_IMAGE" '
            "bash -c 'trap \"\" USR2 TERM; exec \"$0\" -m hpc_imagenet.launch.agent torch.distributed.run") in line
    assert 'export "APPTAINERENV_$v=${!v}"' in line
    patterns = line.split("case $v in ", 1)[1].split(")", 1)[0].split("|")
    # per task (srun's SLURM_PROCID, CUDA_VISIBLE_DEVICES), and every variable the file exports
    assert {"SLURM_*", "PMIX_*", "OMPI_*", "CUDA_VISIBLE_DEVICES"} <= set(patterns)
    assert set(_exports(text)) <= set(patterns), set(_exports(text)) - set(patterns)
    assert "NCCL_DEBUG" in patterns


def test_the_apptainer_task_wrapper_passes_the_tasks_own_values(runtimes, tmp_path):
    # the wrapper, run for real with a stand-in apptainer that prints what it was given
    line = _launch_line(_script(runtimes, "apptainer"))
    wrapper = line.split("--kill-on-bad-exit=1 bash -c '", 1)[1].split("' apptainer-env", 1)[0]
    fake = tmp_path / "bin" / "apptainer"
    fake.write_text("#!/bin/sh\nenv | grep '^APPTAINERENV_' | sort\n")
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "SLURM_PROCID": "3", "CUDA_VISIBLE_DEVICES": "0,1,2,3",
           "PYTHONPATH": "/host/modules", "MASTER_ADDR": "node1"}
    out = subprocess.run(["bash", "-c", wrapper, "apptainer-env", "apptainer", "exec"], env=env, text=True,
                         capture_output=True, check=True).stdout.splitlines()
    assert "APPTAINERENV_SLURM_PROCID=3" in out and "APPTAINERENV_CUDA_VISIBLE_DEVICES=0,1,2,3" in out
    assert "APPTAINERENV_MASTER_ADDR=node1" in out
    assert not any("PYTHONPATH" in v for v in out)  # a module's PYTHONPATH stays out of the image


def test_singularity_is_apptainers_command_line_with_its_prefix(runtimes):
    line = _launch_line(_script(runtimes, "singularity"))
    assert "singularity exec --cleanenv --nv --bind" in line and 'export "SINGULARITYENV_$v=' in line


def test_the_site_mpirun_starts_the_images_program_per_rank(runtimes):
    # apptainer.org/docs/user/main/mpi.html: the hybrid model, the host's mpirun outside the container
    line = _launch_line(_script(runtimes, "apptainer", "--launcher", "mpi", "--module", "openmpi"))
    assert line.lstrip().startswith('"$MPIRUN" -np') and "apptainer exec --cleanenv --nv" in line
    assert line.index("apptainer exec") < line.index('"$PYTHON" -m hpc_imagenet.launch.mpi')


# ---- Pyxis / enroot


def test_pyxis_imports_the_image_once_per_node_and_job_and_passes_the_jobs_variables(runtimes):
    # github.com/NVIDIA/pyxis README: --container-name (a named container is kept and reused by later steps,
    # the import skipped); --container-env NAME,... (the host's value wins over the image's, which wins otherwise)
    text = _script(runtimes, "pyxis")
    line = _launch_line(text)
    assert "CONTAINER_NAME=${CONTAINER_NAME:-hpc-imagenet-$SLURM_JOB_ID}" in text  # the same after a requeue
    assert ('--kill-on-bad-exit=1 --container-image="$CONTAINER_IMAGE" --container-name="$CONTAINER_NAME" '
            '--container-mounts="$CONTAINER_MOUNTS" --container-workdir="$PWD" --no-container-mount-home '
            "--container-env=") in line
    passed = line.split("--container-env=", 1)[1].split(" ", 1)[0].split(",")
    assert set(_exports(text)) <= set(passed) and "NCCL_DEBUG" in passed


def test_pyxis_runs_pmix_under_srun(runtimes):
    # the Pyxis wiki: srun --mpi=pmix; an mpirun inside the container is not the supported path
    line = _launch_line(_script(runtimes, "pyxis", "--launcher", "mpi", "--mpi-starter", "srun"))
    assert line.lstrip().startswith("srun --mpi=pmix ") and "--container-image" in line


# ---- Podman-HPC


def test_podman_hpc_runs_a_migrated_image_with_its_gpu_nccl_and_mpi_modules(runtimes):
    # docs.nersc.gov/development/containers/podman-hpc/ and the package's modules.d: --gpu, --nccl,
    # --openmpi-pmix (SLURM's PMIx under srun --mpi=pmix); shared-run: one container a node, each task an exec
    text = _script(runtimes, "podman-hpc")
    line = _launch_line(text)
    assert 'CONTAINER_VOLUMES+=(-v "$mount")' in text and "mount=$mount:$mount" in text
    assert ("podman-hpc run --rm --gpu --nccl --net host --ipc host -e 'SLURM_*' -e 'SLURMD_*' "
            "-e CUDA_VISIBLE_DEVICES -e MASTER_ADDR") in line
    assert '"${CONTAINER_VOLUMES[@]}" -w "$PWD" "$CONTAINER_IMAGE" bash -c' in line
    assert "--env-host" not in line  # the host's PATH would hide the image's Python
    # podman-hpc's site configuration (podman_hpc/siteconfig.py) reads $USER where os.getlogin() fails, as it does
    # without a terminal: set before the first podman-hpc command
    assert text.index('export USER="${USER:-$(id -un)}"') < text.index("podman-hpc images")
    assert all(f"-e {name}" in line for name in _exports(text))
    # a compute node sees only migrated images: checked before the first start, in one line
    check = next(x for x in text.splitlines() if x.startswith("podman-hpc images"))
    assert text.index(check) < text.index("while :; do")
    assert 'grep -qxF "$CONTAINER_IMAGE"' in check and "podman-hpc pull $CONTAINER_IMAGE" in check
    mpi = _launch_line(_script(runtimes, "podman-hpc", "--launcher", "mpi", "--mpi-starter", "srun"))
    assert mpi.lstrip().startswith("srun --mpi=pmix ") and "podman-hpc shared-run --gpu --nccl --openmpi-pmix" in mpi
    tasks = _launch_line(_script(runtimes, "podman-hpc", "--launcher", "srun"))
    assert "podman-hpc shared-run --gpu" in tasks
    cpu = _launch_line(_script(runtimes, "podman-hpc", "--procs-per-node", "1", gpus="0"))
    assert "--gpu" not in cpu and "--nccl" not in cpu  # the modules bind GPU libraries a CPU node lacks


def test_the_podman_hpc_image_check_runs(runtimes, tmp_path):
    text = _script(runtimes, "podman-hpc")
    check = next(x for x in text.splitlines() if x.startswith("podman-hpc images"))
    fake = tmp_path / "bin" / "podman-hpc"
    for listed, status in (("nvcr.io/nvidia/pytorch:25.01-py3", 0), ("nvcr.io/nvidia/pytorch:24.01-py3", 2)):
        fake.write_text(f"#!/bin/sh\necho '{listed}'\n")
        done = subprocess.run(["bash", "-c", check], env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
                                                          "CONTAINER_IMAGE": "nvcr.io/nvidia/pytorch:25.01-py3"},
                              capture_output=True, text=True)
        assert done.returncode == status, done.stderr
    assert "is not among the images this node sees" in done.stderr and done.stderr.count("\n") == 1


# ---- Charliecloud


def test_charliecloud_binds_onto_the_mount_points_a_read_only_image_has(runtimes):
    # ch-run(1) -b: "With a read-only image (the default), DST must exist"; "Most images do have ten
    # directories /mnt/[0-9] already available as mount points"
    text = _script(runtimes, "charliecloud")
    line = _launch_line(text)
    assert 'CONTAINER_BINDS=(-b "$REPO:/mnt/0" -b "$DATA:/mnt/1" -b "$RUN_FOLDER:/mnt/2")' in text
    assert "mount=$mount:/mnt/$point" in text  # further folders at /mnt/3..
    assert '"${CONTAINER_BINDS[@]}" -c /mnt/0 "$CONTAINER_IMAGE" -- bash -c' in line
    assert 'TRAIN_ARGS+=($EXTRA_ARGS /mnt/1)' in text and "--log-dir /mnt/2" in text
    assert ":$REPO" not in text and '"$DATA:$DATA"' not in text  # no bind at a host path


def test_charliecloud_applies_the_images_environment_and_gives_staging_back_its_folder(runtimes):
    # ch-run(1): --set-env (no argument) applies /ch/environment; TMPDIR is unset, and the host's $TMPDIR (or
    # /tmp) is bound at the image's /tmp; --set-env NAME=VALUE sets one variable
    line = _launch_line(_script(runtimes, "charliecloud", "--stage-dir", "$TMPDIR"))
    assert "ch-run --set-env --set-env=LOG_DIR=/mnt/2 --set-env=STARTS_LOG=/mnt/2/starts.log --set-env=TMPDIR=/tmp" \
        in line


def test_charliecloud_bind_lines_run(runtimes, tmp_path):
    text = _script(runtimes, "charliecloud")
    lines = [x for x in text.splitlines() if x.startswith(("CONTAINER_MOUNTS=", "RUN_FOLDER=", "CONTAINER_BINDS=",
                                                           "IFS=,", "point=", "for mount"))]
    env = {"PATH": "/usr/bin:/bin", "REPO": "/home/u/hpc-imagenet", "DATA": "/data/imagenet",
           "LOG_DIR": "runs/x-1", "CONTAINER_MOUNTS": "/scratch/a,/p/b:/opt/b"}
    out = subprocess.run(["bash", "-c", "\n".join([*lines, 'printf "%s\\n" "${CONTAINER_BINDS[@]}"'])], env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["-b", "/home/u/hpc-imagenet:/mnt/0", "-b", "/data/imagenet:/mnt/1", "-b",
                   "/home/u/hpc-imagenet/runs/x-1:/mnt/2", "-b", "/scratch/a:/mnt/3", "-b", "/p/b:/opt/b"]


# ---- refused before anything is submitted


@pytest.mark.parametrize("more, says", [
    (["--container-runtime", "apptainer", "--container", "missing.sif"], "--container missing.sif does not exist"),
    (["--container-runtime", "apptainer", "--container", "docker://nvcr.io/nvidia/pytorch:25.01-py3"],
     "should run a SIF built once"),
    (["--container-runtime", "pyxis", "--container", "nvcr.io/nvidia/pytorch:25.01-py3"],
     "Pyxis spells a registry image nvcr.io#nvidia/pytorch:25.01-py3"),
    (["--container-runtime", "pyxis", "--container", "pytorch.sqsh"], "give it as ./pytorch.sqsh"),
    (["--container-runtime", "pyxis", "--container", "docker://ubuntu:22.04"], "REGISTRY#IMAGE:TAG"),
    (["--container-runtime", "podman-hpc", "--container", "ubuntu:22.04"], "REGISTRY/NAME:TAG"),
    (["--container-runtime", "podman-hpc", "--container", "/images/pt.sqsh"], "pulled and migrated beforehand"),
    (["--container-runtime", "charliecloud", "--container", "nvcr.io/nvidia/pytorch:25.01-py3"],
     "ch-run runs a directory or SquashFS image by its path"),
    (["--container-runtime", "pyxis", "--container", "img#x:1", "--launcher", "mpi"],
     "pyxis starts containers through srun"),
    (["--container-runtime", "podman-hpc", "--container", "localhost/x:1", "--launcher", "mpi"],
     "podman-hpc starts containers through srun"),
    (["--container-runtime", "apptainer", "--container", "./img.sif", "--venv", ".venv"],
     "a container brings its own Python"),
    (["--container-runtime", "apptainer", "--container", "./img.sif", "--data", "/elsewhere/imagenet"],
     "DATA /elsewhere/imagenet is not under any --container-mounts folder"),
    (["--container-runtime", "pyxis", "--container", "img#x:1", "--stage-dir", "$TMPDIR"],
     "enroot puts a RAM tmpfs on /tmp"),
    (["--container-runtime", "charliecloud", "--container", "./img", "--stage-dir", "/local/stage"],
     "under Charliecloud stage into '$TMPDIR'"),
    (["--container-mounts", "/data"], "need --container IMAGE"),
])
def test_a_setting_that_cannot_work_is_refused_in_one_line(runtimes, capsys, more, says, monkeypatch):
    monkeypatch.chdir(runtimes)
    (runtimes / "img.sif").write_bytes(b"x")
    (runtimes / "img").mkdir()
    assert generate.main(["--data", str(runtimes / "data"), "--container-mounts", str(runtimes), *more]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_a_runtime_the_node_lacks_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH: no runtime, no srun
    assert generate.main(["--container", "./img", "--container-runtime", "charliecloud", "--data", "data"]) == 2
    assert "ch-run is not on this node's PATH" in capsys.readouterr().err
    assert generate.main(["--container", "img:1", "--data", "data"]) == 2
    assert "no container runtime on this node" in capsys.readouterr().err
