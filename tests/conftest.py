"""What every tier shares: the generated JPEG datasets, and each test's tier marker.

The tiers are the folders of tests/ (unit, engine, launch, cluster); each test gets its folder's
marker, so ``-m unit`` or ``-m "not cluster"`` select by tier. The long end-to-end scenarios of the
engine and cluster tiers are also marked ``long``: ``make test`` leaves them to ``make test-long``. Fixtures
only one tier uses live in that folder's conftest.py (the SLURM cluster in cluster/conftest.py)."""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from hpc_imagenet.imagenet.data import demo
from tests.helpers import TIERS

TESTS = Path(__file__).resolve().parent

# The cluster tier is two xdist groups, each with its own SLURM cluster, so that two workers wait on
# SLURM at once while the third trains. These modules form the second group: about half of the
# tier's time, as measured in the suite.
SECOND_CLUSTER = {"test_slurm_requeue", "test_slurm_committed", "test_slurm_staging", "test_results_scaling",
                  "test_results_slurm", "test_launch_pytorchjob", "test_launch_slurm",
                  "test_slurm_own_script_container"}

# The long end-to-end scenarios, marked `long`: each starts whole multi-node jobs again and again (faults,
# restarts, sweeps, job chains, staging and containers with requeues) or trains the seed's full-size command.
# `make test` deselects them so that it keeps within its 15 minutes on the slowest 2-core VM (the suite is
# CPU-bound: every trainer they start imports torch, ~4 CPU s); `make test-long` runs them, and CI (.ci/run)
# runs both. What make test keeps of each behaviour: USR2 -> checkpoint -> requeue -> exact resume under srun,
# scontrol's SIGTERM under torchrun and submitit's preemption; a plain DDP script and a Lightning one with the
# callback (2 x 1), stopped and resumed exactly; one generated job per launcher; the committed batch files but
# the two whose paths other jobs run; the Charliecloud job preempted and resumed (2 nodes); the harness's SLURM
# records; the engine's staging, shards, preemption and collective-timeout tests; the seed's other command lines.
LONG_MODULES = {"cluster/test_slurm_faults.py", "cluster/test_slurm_recovery.py", "cluster/test_results_scaling.py",
                "cluster/test_jobchain.py", "cluster/test_slurm_own_script_container.py",
                "cluster/test_slurm_staging.py", "engine/test_tta_engine.py"}
LONG_TESTS = {"test_seed_torch_distributed_launch_command_verbatim",
              # engine faults beyond the collective timeout's, and the shards bench's sweep of its variants
              "test_a_slowed_rank_is_named_in_the_log_and_in_run_json",
              "test_kill_in_mid_write_keeps_the_previous_checkpoint_and_the_resume_is_exact",
              "test_shards_bench_records_and_report",
              # the runners' hang hunt, 3 x 50 calls beside a busy loop per core (make test keeps the prepare
              # command's one run under that load)
              "test_every_runner_ends_with_the_jobs_error_50_times_under_load",
              # generated jobs beyond one per launcher (torchrun on one node: the scontrol requeue scenario's)
              "test_generated_job_trains[torchrun_1node]", "test_generated_job_trains[mpi_srun_pmix_2node]",
              # the Charliecloud job preempted and resumed in the image on 4 nodes (make test: on 2)
              "test_charliecloud_job_is_preempted_requeued_and_resumes_exactly[4nodes]",
              # two committed files whose paths make test runs in its container and own-script jobs
              "test_committed_file_trains_through_its_export_settings[ddp_4node_charliecloud.sh]",
              "test_committed_file_trains_through_its_export_settings[own_lightning_2node.sh]",
              # each recipe family trains in make test (examples, ffcv-16, goyal, mlperf, rsb-a1, torchvision-v2);
              # the family's other sizes here
              *(f"test_recipe_trains_on_jpegs_and_run_json_names_it[{name}]"
                for name in ("ffcv-24", "ffcv-32", "ffcv-40", "ffcv-56", "ffcv-88", "rsb-a2", "rsb-a3")),
              # the prepared ImageNet's odd files (the PNG, the CMYK JPEG) through the default and the fast decoder
              # in make test; through PIL's, the batch decoder and DALI here
              *(f"test_every_backend_trains_on_the_prepared_shards_with_the_odd_files[{backend}]"
                for backend in ("pil", "device", "dali")),
              # the harness's SLURM point past its timeout (make test keeps its 1- and 2-node records)
              "test_slurm_point_past_its_timeout_is_cancelled_not_left_queued",
              # the requeue path's variants (make test keeps USR2 under srun, scontrol's SIGTERM, submitit)
              "test_time_limit_signal_checkpoints_requeues_and_resumes[mpi]",
              "test_time_limit_signal_checkpoints_requeues_and_resumes[launch]",
              "test_time_limit_signal_during_start_up_is_not_lost",
              "test_a_run_that_finishes_after_the_signal_is_not_requeued",
              "test_a_trainer_killed_by_the_signal_while_starting_is_requeued",
              # a user's own script: make test keeps the plain DDP script and the Lightning one with the callback
              # (on 2 x 1; the 4 x 2 here)
              "test_a_lightning_script_with_the_callback_resumes_at_the_exact_step[4x2]",
              "test_lightnings_own_requeue_under_srun_is_requeued_from_the_host_and_restored",
              "test_a_signal_during_the_scripts_imports_is_not_lost",
              "test_a_script_that_ignores_the_contract_ends_in_time_and_says_why",
              "test_a_script_that_fails_at_every_start_spends_the_start_budget_then_stops",
              "test_a_script_reads_its_nodes_staged_copy_and_resumes_mid_epoch_at_the_exact_batch"}


# What the whole suite needs free where pytest keeps its temporary folders. Measured under `make test`
# with pyproject's tmp_path_retention_policy (a passing test's folder goes when it passes): 1.1 GB in
# /tmp at its peak, 0.7 GB of it pytest's folders; 3 GB leaves room for a few failing tests' folders.
# HPC_IMAGENET_TEST_FREE_GB overrides it.
FREE_NEEDED_GB = 3.0


@pytest.fixture(scope="session")
def jpeg_data(tmp_path_factory):
    """3 classes, 16 train / 7 val JPEGs each: 21 val images, an odd count to exercise the tail."""
    return demo.generate(tmp_path_factory.mktemp("jpeg_data"), classes=3, train_per_class=16,
                              val_per_class=7, size=(40, 32))


@pytest.fixture(scope="session")
def learnable_data(tmp_path_factory):
    """4 clearly different classes, enough images to learn in a few CPU epochs."""
    return demo.generate(tmp_path_factory.mktemp("learnable"), classes=4, train_per_class=32,
                              val_per_class=8, size=(40, 32))


def pytest_report_header(config):
    import torch

    return f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}"


def pytest_sessionstart(session):
    """Stop before the first test where the temporary folders' disk cannot hold the suite: a full disk
    otherwise shows as hundreds of unrelated errors (mkdir and checkpoint writes) minutes in."""
    config = session.config
    if hasattr(config, "workerinput"):  # an xdist worker: its controller has checked
        return
    where = Path(config.option.basetemp or tempfile.gettempdir()).resolve()
    existing = next(p for p in (where, *where.parents) if p.exists())
    free_gb = shutil.disk_usage(existing).free / 1e9
    try:
        needed_gb = float(os.environ.get("HPC_IMAGENET_TEST_FREE_GB", FREE_NEEDED_GB))
    except ValueError:
        pytest.exit(f"HPC_IMAGENET_TEST_FREE_GB={os.environ['HPC_IMAGENET_TEST_FREE_GB']!r} is not a number of GB: "
                    "set it to one (e.g. 3) or unset it", returncode=pytest.ExitCode.USAGE_ERROR)
    if free_gb < needed_gb:
        pytest.exit(f"only {free_gb:.1f} GB free on the disk of {where}, and the tests need {needed_gb:g} GB there "
                    "for their temporary files: free space there, or point TMPDIR (or --basetemp) at a disk "
                    "with room", returncode=pytest.ExitCode.USAGE_ERROR)


def pytest_configure(config):
    """One intra-op thread for what a test trains in this process, as its child processes get
    (tests.helpers.child_env): the xdist workers already share the cores, and spare torch threads
    only spin (about 7 % of the unit tier's CPU).

    bf16 runs as asked on every CPU (HPC_IMAGENET_CPU_BF16=emulate, inherited by every process a test
    starts): where the CPU lacks bf16 instructions the engine would otherwise run fp32, and the O1-O3
    paths, master weights and the bf16 DDP hook would go untested there. The tests of that fallback set
    the variable to auto themselves."""
    import torch

    from hpc_imagenet.imagenet.model import precision

    torch.set_num_threads(1)
    os.environ.setdefault(precision.CPU_BF16_ENV, "emulate")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    """Mark each test with its tier: the first folder of its path under tests/.

    The cluster tier is also two xdist groups: under ``pytest -n 3 --dist loadgroup`` (make test)
    two workers each run half of it, in order, on a SLURM cluster of their own, while the third
    runs the CPU-bound tiers in the time the cluster tests spend waiting on SLURM."""
    for item in items:
        try:
            module = item.path.resolve().relative_to(TESTS)
        except ValueError:  # collected from outside tests/
            continue
        folder = module.parts[0]
        if folder in TIERS:
            item.add_marker(folder)
        if module.as_posix() in LONG_MODULES or {item.name, getattr(item, "originalname", None)} & LONG_TESTS:
            item.add_marker("long")
        if folder == "cluster":
            half = "b" if item.path.stem in SECOND_CLUSTER else "a"
            item.add_marker(pytest.mark.xdist_group(f"cluster-{half}"))


@pytest.fixture(scope="session")
def installed_python(tmp_path_factory) -> Path:
    """The python of a venv where the project is pip-installed from its wheel, beside no checkout
    (tests/installed.py). Built once per pytest run: the xdist workers that need it (the engine tier's and a
    cluster group's) share one build in the run's common temporary folder, the first to come making it."""
    from tests import installed

    base = tmp_path_factory.getbasetemp()  # under xdist a worker's own folder (popen-gwN) in the run's
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "installed"
    with open(f"{shared}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the others wait here for the first build
        python = shared / "venv" / "bin" / "python"
        if not python.exists():
            shutil.rmtree(shared, ignore_errors=True)  # a build that failed part-way starts over
            shared.mkdir()
            python = installed.build(shared)
    return python
