"""Shared helpers of the test tiers (plain functions, no fixtures: those are in the conftest.py
files): running the real scripts as subprocesses and reading what they wrote, a photo-like test
image, and evaluating the settings block of a generated SLURM batch script."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from hpc_imagenet.launch.ports import free_port  # noqa: F401  (tests import it from here)
from hpc_imagenet.harness.core import records
from hpc_imagenet.slurm.localcluster.packages import FASHION_MNIST_PACKAGE, can_install, install
from hpc_imagenet.slurm.localcluster.scenarios.jobs import ARCH as TINY_ARCH
from studies.fashion_mnist_race.fashion_mnist import FILES, SOURCE_DIR

REPO = Path(__file__).resolve().parents[1]
TIERS = ("unit", "engine", "launch", "cluster")  # the folders of tests/, fastest first
PYTHON = sys.executable
BIN = Path(PYTHON).parent
SCRIPTS = REPO / "imagenet"

# Small enough for 2 CPU cores: the local cluster scenarios' 1.4 M-parameter model (a third of
# ResNet-18's CPU per step, a 3 MB checkpoint) at 32x32, batch 8, no loader workers.
TINY = ["-a", TINY_ARCH, "--image-size", "32", "-b", "8", "--workers", "0", "--dist-backend", "gloo"]
# imagenet_nd.py on 96 dummy images: 2 epochs of 12 steps (3 of them warm-up), each steady step's time
DUMMY_STEP_TIMES = [*TINY, "--dummy", "--dummy-size", "96", "--num-classes", "10", "--epochs", "2", "-p", "5",
                    "--val-steps", "1", "--step-times"]


def script(name: str) -> str:
    return str(SCRIPTS / name)


def child_env(**extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "LOCAL_", "WORLD_SIZE", "MASTER_", "SLURM_", "OMPI_", "PMI", "PMIX",
                                "TORCHELASTIC", "GROUP_"))}
    env.update({"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **extra})
    return env


def run(args: Sequence[str], timeout: float = 300, env: Optional[Dict[str, str]] = None,
        cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env or child_env(), capture_output=True, text=True,
                          timeout=timeout)


def python(*args, **kw) -> subprocess.CompletedProcess:
    return run([PYTHON, *args], **kw)


def read_run(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "run.json").read_text())


def event_files(run_dir: Path) -> List[Path]:
    return sorted(Path(run_dir).rglob("events.out.tfevents.*"))


def tb_scalars(run_dir: Path) -> Dict[str, list]:
    """tag -> [(step, value)] read back with TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def explain(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"


def photo(height: int = 375, width: int = 500, seed: int = 0) -> np.ndarray:
    """Smooth colour fields plus blotches and noise: compresses like a photo, not like a flat pattern."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    img = np.stack([127 + 90 * np.sin(x * rng.uniform(0.01, 0.04) + y * rng.uniform(0.01, 0.04) + c)
                    for c in range(3)], axis=-1)
    blotches = rng.normal(0, 30, (height // 8 + 1, width // 8 + 1, 3)).repeat(8, 0).repeat(8, 1)
    img += blotches[:height, :width] + rng.normal(0, 12, (height, width, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def _settings_block(text: str) -> str:
    start = text.index("# ---- settings")
    return text[start:text.index("# ---- software environment")]


def eval_settings(text: str, names: list, env: dict) -> list:
    """The values bash gives NAMES after running the script's settings block with ENV (job 42, name j)."""
    probe = _settings_block(text) + "".join(f'printf "%s\\0" "${n}"\n' for n in names)
    proc = subprocess.run(["bash", "-c", probe], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "SLURM_JOB_ID": "42", "SLURM_JOB_NAME": "j", **env})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("\0")[:-1]


def fashion_mnist_dir() -> Path:
    """The folder of Debian's Fashion-MNIST files (`make test-system-deps` installs the package; a
    pytest started without it installs it here, as root); FileNotFoundError naming the package elsewhere."""
    def present() -> bool:
        return all((SOURCE_DIR / name).is_file() for pair in FILES.values() for name in pair)

    if not present() and can_install():
        install([FASHION_MNIST_PACKAGE], lambda: [] if present() else [FASHION_MNIST_PACKAGE])
    if not present():
        raise FileNotFoundError(f"no Fashion-MNIST in {SOURCE_DIR} (Debian: apt-get install {FASHION_MNIST_PACKAGE})")
    return SOURCE_DIR


# ---------------------------------------------------------------- fixture records for the report tests

REPORT_ENV = {"hostname": "node1", "cpu_model": "Test CPU", "cpu_count": 8, "torch": "2.x", "gpu_name": None,
              "gpu_count": 0, "nodes": 1, "git_commit": "abc123", "command": "bench"}


def train_record(sweep, nodes, rate, env=REPORT_ENV):
    point = {"variant": "ddp", "procs_per_node": 1, "nodes": nodes, "batch_size": 16, "precision": "O0",
             "amp_dtype": None, "data": "dummy", "arch": "resnet18", "image_size": 64, "epochs": 1,
             "steps_per_epoch": 20, "val_steps": 1, "workers": 0, "extra_args": [], "world_size": nodes, "setup": None}
    m = {"images_per_s": rate, "images_per_s_per_process": rate / nodes, "step_time_ms": 16e3 / (rate / nodes),
         "world_size": nodes, "nodes": nodes, "parameters": 11_689_512, "precision_label": "fp32"}
    return records.make_record("train", sweep, point, m, env, runner="slurm")


def write_records(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def md_rows(md, header):
    lines = md[md.index(header):].splitlines()
    keys = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):  # the table ends
            break
        rows.append(dict(zip(keys, (c.strip() for c in line.strip("|").split("|")))))
    return rows


# torchvision's reference command, with the script swapped: torchvision's ResNet-50 recipe (IMAGENET1K_V2)
TORCHVISION_COMMAND = (
    "--model resnet50 --batch-size 128 --lr 0.5 --lr-scheduler cosineannealinglr --lr-warmup-epochs 5 "
    "--lr-warmup-method linear --auto-augment ta_wide --epochs 600 --random-erase 0.1 --weight-decay 0.00002 "
    "--norm-weight-decay 0.0 --label-smoothing 0.1 --mixup-alpha 0.2 --cutmix-alpha 1.0 --train-crop-size 176 "
    "--model-ema --val-resize-size 232 --ra-sampler --ra-reps 4").split()


def container_exports(image: Path) -> list:
    """sbatch --export settings that run a batch file's training in IMAGE (the test cluster's light image) with
    this checkout's venv: the image's Python, the checkout also bound at its own path (a folder the light image
    has), the venv's packages on PYTHONPATH."""
    site = Path(sys.prefix) / "lib" / f"python3.{sys.version_info.minor}" / "site-packages"
    return [f"CONTAINER_IMAGE={image}", "PYTHON=python3", f"PYTHONPATH={site}:{REPO}",
            f"CONTAINER_MOUNTS={REPO}:{REPO}"]
