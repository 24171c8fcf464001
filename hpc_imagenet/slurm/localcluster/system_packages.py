"""``python3 -m hpc_imagenet.slurm.localcluster.system_packages install|remove|missing [SET ...]``: the Debian
packages the tests and the local cluster take from the distribution, by set (``packages.SETS``).

``make test-system-deps`` installs them all before pytest starts, so no test installs anything; CI
removes them first (``remove``), so that the install step is tried on every run as on a new machine.
Standard library only: it runs with the system's python3 before the venv exists.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from hpc_imagenet.slurm.localcluster.packages import OPTIONAL, SETS, by_hand, dpkg_missing, install, remove

# the compiler and libjpeg's headers stay: other work on the machine uses them
KEPT = ("build",)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m hpc_imagenet.slurm.localcluster.system_packages",
                                     description="Install, remove or list the Debian packages that the tests and "
                                                 "the local cluster take from the distribution.")
    parser.add_argument("action", choices=("install", "remove", "missing"))
    parser.add_argument("sets", nargs="*", metavar="SET",
                        help=f"one of {', '.join(SETS)} (default: all but {', '.join(OPTIONAL)}; remove: all but "
                             f"{', '.join(KEPT)})")
    args = parser.parse_args(argv)
    unknown = [name for name in args.sets if name not in SETS]
    if unknown:
        parser.error(f"unknown package set {', '.join(unknown)}: choose from {', '.join(SETS)}")
    if args.action == "remove" and set(args.sets) & set(KEPT):
        parser.error(f"remove leaves {', '.join(KEPT)} in place: other work on the machine uses it")
    default = [name for name in SETS if name not in (KEPT if args.action == "remove" else OPTIONAL)]
    packages = [package for name in (args.sets or default) for package in SETS[name]]
    try:
        if args.action == "install":
            install(packages, lambda: dpkg_missing(packages))
        elif args.action == "remove":
            print(f"removed: {' '.join(remove(packages)) or 'nothing (none installed)'}")
        elif missing := dpkg_missing(packages):
            print(f"missing: {' '.join(missing)} (install: {by_hand(missing)})")
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from hpc_imagenet.slurm.localcluster.system_packages import main  # under its one name, not a copy
    sys.exit(main(sys.argv[1:]))
