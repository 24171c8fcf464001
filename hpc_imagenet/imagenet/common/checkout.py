"""Where the package runs from: a checkout of the project, or an install.

A checkout has the entry scripts (``imagenet/imagenet_*.py``) and the data folder ``results/`` beside the
package; an install (a wheel in site-packages, a container image) has the package alone, and nothing may be
written beside it. Everything that needs the checkout's files, or a default place to write, asks here.
"""
import os
from pathlib import Path
from typing import Optional

PACKAGE = Path(__file__).resolve().parents[2]  # hpc_imagenet/
RESULTS_ENV = "HPC_IMAGENET_RESULTS"  # where records, reports and run folders go, when set


def root() -> Optional[Path]:
    """The checkout that holds this package, or None when the package is installed."""
    top = PACKAGE.parent
    if (top / "imagenet" / "imagenet_ddp.py").is_file() and (top / "pyproject.toml").is_file():
        return top
    return None


def results_dir() -> Path:
    """Where the harness writes by default: $HPC_IMAGENET_RESULTS, else the checkout's results/, else results/ in
    the current folder (never site-packages)."""
    if os.environ.get(RESULTS_ENV):
        return Path(os.environ[RESULTS_ENV]).expanduser().absolute()
    checkout = root()
    return checkout / "results" if checkout is not None else Path.cwd() / "results"
