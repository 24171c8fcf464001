"""The generator's options: ``build_parser`` (one option per JobSpec field, named as the field; the shared
job description's options come from hpc_imagenet/slurm/job.py, the same as hpc_imagenet.slurm.submit's) and
``spec_from_args``, which turns a generator command line (the one each batch file's header records)
into a JobSpec."""
from __future__ import annotations

import argparse
from typing import List, Optional, Sequence, Tuple

from hpc_imagenet.imagenet.common import checkout
from hpc_imagenet.imagenet.recipes import RECIPES, named_in
from hpc_imagenet.slurm import containers
from hpc_imagenet.slurm.generate import own_script
from hpc_imagenet.slurm.generate.spec import GenerateError, JobSpec
from hpc_imagenet.slurm.job import add_options

ENTRIES = ("checkout", "installed")
DESCRIPTION = "sbatch files for N nodes x G GPUs, any variant and launcher, as a pure function of a JobSpec."


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m hpc_imagenet.slurm.generate", description=DESCRIPTION,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter, allow_abbrev=False)
    d = JobSpec()
    add_options(p, d)  # the shared job description's fields: --name, --nodes, ..., --time, --variant
    for flag, typ, help_ in (("--tasks-per-node", int, "SLURM tasks per node (default from the launcher)"),
                             ("--epochs", int, "EPOCHS default"),
                             ("--batch-size", int, "BATCH_SIZE default, per process"),
                             ("--workers", int, "WORKERS default: loader processes per training process"),
                             ("--signal-seconds", int, "send the requeue signal this long before the time limit"),
                             ("--max-restarts", int, "MAX_RESTARTS default: restarts in a row without a newer "
                              "checkpoint (torchrun's and the batch loop's together; a crash at start starts "
                              "1 + this many times)"),
                             ("--max-starts", int, "MAX_STARTS default: starts of the training in one allocation "
                              "in all, progress or not")):
        p.add_argument(flag, type=typ, default=getattr(d, flag[2:].replace("-", "_")), help=help_)
    for flag in ("--output", "--error", "--venv", "--conda-env", "--launcher"):
        p.add_argument(flag, default=getattr(d, flag[2:].replace("-", "_")))
    p.add_argument("--mpi-starter", default=d.mpi_starter, help="with --launcher mpi: mpirun or srun")
    p.add_argument("--python", default=d.python, help="PYTHON default (after module/venv setup)")
    p.add_argument("--entry", choices=ENTRIES, default=None,
                   help="what the job runs: the checkout's imagenet/*.py (checkout: submit from the checkout) or "
                   "the package installed in PYTHON's environment (installed: submit from any folder); default: "
                   "checkout when this command runs from a checkout, else installed")
    p.add_argument("--script", default=None, metavar="PATH", help="run your own training script (its path from the "
                   "folder you submit from) instead of the engine's, under the requeue contract "
                   "(hpc_imagenet.requeue); its own flags go after --")
    p.add_argument("--framework", default=d.framework, choices=own_script.FRAMEWORKS,
                   help="with --script: plain (the script calls hpc_imagenet.requeue) or lightning (a Lightning "
                   "Trainer with hpc_imagenet.requeue.lightning.Requeue)")
    p.add_argument("--data", default=d.data, help="DATA default: dataset root")
    p.add_argument("--arch", default=d.arch, help="ARCH default")
    p.add_argument("--stage-dir", default=d.stage_dir, help="STAGE_DIR default: copy DATA to this node-local "
                   "folder once per node first, e.g. '$TMPDIR' (quoted: each process expands it on its node)")
    p.add_argument("--module", action="append", default=[], help="module to load (repeatable)")
    p.add_argument("--setup", action="append", default=[], metavar="LINE",
                   help="shell line run before training, e.g. 'module load cuda' (repeatable)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="export (repeatable)")
    p.add_argument("--sweep", action="append", default=[], metavar="SETTING=V1,V2",
                   help="job array over the product of the values (repeatable)")
    p.add_argument("--container", default=d.container, metavar="IMAGE", help="run each job step in this image "
                   "(a .sif, a SquashFS or directory image, or a registry reference such as "
                   "nvcr.io/nvidia/pytorch:25.01-py3); CONTAINER_IMAGE at submit time overrides it")
    p.add_argument("--container-runtime", default=d.container_runtime, choices=containers.RUNTIMES,
                   help="default: the runtime this login node has")
    p.add_argument("--container-mounts", action="append", default=[], metavar="SRC[:DST]",
                   help="a folder the image must see besides the checkout: the data, the staging folder (repeatable)")
    p.add_argument("--no-requeue", dest="requeue", action="store_false", help="no signal, no requeue")
    p.add_argument("--signal", default=d.signal, help="requeue signal sent to the batch script")
    p.add_argument("--write-examples", action="store_true", help="regenerate the committed slurm/*.sh")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then further training flags")
    return p


def _pairs(items: Sequence[str], flag: str) -> List[Tuple[str, str]]:
    out = []
    for item in items:
        if "=" not in item:
            raise GenerateError(f"{flag} {item!r}: expected NAME=VALUE")
        out.append(tuple(item.split("=", 1)))
    return out


def spec_from_args(argv: Sequence[str], on_login_node: bool = True) -> JobSpec:
    """Parse a generator command line (the same one the header records) into a JobSpec (ON_LOGIN_NODE: see
    JobSpec)."""
    parser = build_parser()

    def reject(message: str) -> None:
        raise GenerateError(message)

    parser.error = reject  # type: ignore[method-assign]
    ns = vars(parser.parse_args(list(argv)))
    if ns["script"] is not None:
        own_script.refuse_engine_options(argv)
        if not own_script.given(argv, "--data"):
            ns["data"] = None  # the script's data is its own business unless --data is given
    ns.pop("write_examples")
    train = ns.pop("train_args")
    ns["train_args"] = tuple(train[1:] if train[:1] == ["--"] else train)
    ns["modules"] = tuple(ns.pop("module"))
    ns["entry"] = ns["entry"] or ("checkout" if checkout.root() is not None else "installed")
    ns["setup"] = tuple(ns["setup"])
    ns["container_mounts"] = tuple(ns["container_mounts"])
    if ns["container"] and not ns["container_runtime"]:  # detected once here, not at every use of the spec
        ns["container_runtime"] = containers.detect()
    ns["env"] = tuple(_pairs(ns.pop("env"), "--env"))
    ns["sweep"] = tuple((k, tuple(v.split(","))) for k, v in _pairs(ns.pop("sweep"), "--sweep"))
    recipe = None if ns["script"] else _recipe_epochs(ns["train_args"])
    if recipe is not None and "--epochs" not in argv[:len(argv) - len(train)]:
        ns["epochs"] = recipe  # EPOCHS is passed as --epochs, which would win over the recipe's own
    return JobSpec(**ns, command=tuple(argv), on_login_node=on_login_node)


def _recipe_epochs(train_args: Sequence[str]) -> Optional[int]:
    """The epochs of the --recipe among the training flags (None without one; an unknown name is the
    trainer's error to report)."""
    recipe = RECIPES.get(named_in(list(train_args)) or "")
    return recipe.epochs if recipe is not None else None

