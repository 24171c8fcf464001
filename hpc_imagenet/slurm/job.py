"""One description of a training job's shape and resources, shared by the batch-file generator
(``hpc_imagenet.slurm.generate``'s JobSpec) and the submitit submission (``hpc_imagenet.slurm.submit``'s Submission).

:class:`JobShape` holds what both describe (name, nodes, GPUs and processes per node, CPUs, memory,
time limit, site options, variant, training flags), with the views derived from them; :func:`check`
refuses a shape that cannot work, in one line naming the fix; :func:`add_options` gives both command
lines one option per field, named as the field. A field added here is therefore in both tools at once:
an option of both command lines, checked for both, and a ``#SBATCH`` line of both (:meth:`JobShape.site`).
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hpc_imagenet.imagenet.common.variants import SINGLE_PROCESS, VARIANTS

CPUS_PER_PROCESS = 8  # CPUs per training process when --cpus-per-task is not given
_TIME_FORMATS = (  # SLURM's --time forms -> (days, hours, minutes, seconds) group names
    re.compile(r"(?P<m>\d+)"), re.compile(r"(?P<m>\d+):(?P<s>\d+)"),
    re.compile(r"(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)"), re.compile(r"(?P<d>\d+)-(?P<h>\d+)"),
    re.compile(r"(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+)"), re.compile(r"(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)"))
_MEM = re.compile(r"\d+[KMGT]?")
SIGNAL_MAX_SECONDS = 65535  # sbatch --signal's largest delay


class JobError(ValueError):
    """A job that cannot work; the message is one line saying what to change."""


def _option(default: Any, help_: str, type_: type = str) -> Any:
    """A field that is also an option of both command lines (``--gpus-per-node`` for ``gpus_per_node``)."""
    return field(default=default, metadata={"help": help_, "type": type_})


@dataclass(frozen=True)
class JobShape:
    """The job's shape and resources. Each field with an option is one ``--field-name`` of both tools."""

    name: str = _option("imagenet", "job name (%%x in output paths)")
    nodes: int = _option(1, "nodes", int)
    gpus_per_node: int = _option(4, "GPUs per node (0: CPU nodes, then --procs-per-node processes each)", int)
    procs_per_node: Optional[int] = _option(None, "training processes per node on CPU nodes (default: one per GPU)",
                                            int)
    cpus_per_task: Optional[int] = _option(None, f"default {CPUS_PER_PROCESS} per training process", int)
    mem: Optional[str] = _option(None, "memory per node, e.g. 64G (0: all of it)")
    time: str = _option("24:00:00", "time limit (SLURM format: minutes, HH:MM:SS or D-HH:MM:SS)")
    partition: Optional[str] = _option(None, "SLURM partition")
    account: Optional[str] = _option(None, "SLURM account")
    qos: Optional[str] = _option(None, "SLURM quality of service")
    constraint: Optional[str] = _option(None, "SLURM node features, e.g. a100")
    variant: str = _option("ddp", f"{' | '.join(VARIANTS)}")
    train_args: Tuple[str, ...] = ()  # the training flags (each tool's command line takes them after --)

    @property
    def single_process(self) -> bool:
        return self.variant in SINGLE_PROCESS

    @property
    def procs(self) -> int:
        """Training processes per node."""
        if self.single_process:
            return 1
        return self.procs_per_node or self.gpus_per_node or 1

    @property
    def tasks(self) -> int:
        """SLURM tasks per node: one per process (a launcher that starts a node's processes itself says otherwise)."""
        return self.procs

    @property
    def procs_per_task(self) -> int:
        return self.procs // self.tasks

    @property
    def cpus(self) -> int:
        if self.cpus_per_task:
            return self.cpus_per_task
        if self.variant == "dp":  # one process drives every GPU of the node
            return CPUS_PER_PROCESS * max(self.gpus_per_node, 1)
        return CPUS_PER_PROCESS * max(self.procs_per_task, 1)

    @property
    def time_seconds(self) -> int:
        return parse_time(self.time)

    def site(self) -> List[Tuple[str, str]]:
        """The ``#SBATCH`` options the site decides (memory, time, where and under whose account), set ones only."""
        return [(k, v) for k, v in (("mem", self.mem), ("time", self.time), ("partition", self.partition),
                                    ("account", self.account), ("qos", self.qos), ("constraint", self.constraint))
                if v is not None]


# ---------------------------------------------------------------------------------------------
# the checks: one line that says what to change


def parse_time(text: str) -> int:
    """SLURM time limit -> seconds. Accepts M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""
    for pattern in _TIME_FORMATS:
        m = pattern.fullmatch(text.strip())
        if m:
            parts = {k: int(v) for k, v in m.groupdict().items() if v is not None}
            seconds = (parts.get("d", 0) * 86400 + parts.get("h", 0) * 3600 + parts.get("m", 0) * 60
                       + parts.get("s", 0))
            if seconds <= 0:
                raise JobError(f"time limit {text!r} is zero; give at least one minute")
            return seconds
    raise JobError(f"time limit {text!r} does not parse; use minutes, HH:MM:SS or D-HH:MM:SS (e.g. 24:00:00)")


def check_text(label: str, value: str) -> None:
    """A value that goes into a script or a command line: no newline or control character."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise JobError(f"{label} {value!r} contains a newline or control character")


def check_directive(label: str, value: str) -> None:
    """A value of an ``#SBATCH`` line: sbatch strips one level of quotes itself, so nested ones cannot be said."""
    check_text(label, value)
    if not value or any(c in value for c in "'\"\\"):
        raise JobError(f"{label} {value!r} must be non-empty and contain no quotes or backslashes")


def check_signal(label: str, seconds: int, time: str) -> None:
    """The requeue signal comes ``seconds`` before the time limit: there must be time for it."""
    limit = parse_time(time)
    if not 0 < seconds < min(limit, SIGNAL_MAX_SECONDS + 1):
        raise JobError(f"{label} {seconds} must be between 1 and the time limit ({limit}s) so the trainers can "
                       "checkpoint before it")


def check_layout(job: JobShape) -> None:
    """Nodes, GPUs, processes and the variant fit together."""
    if job.nodes < 1:
        raise JobError(f"--nodes must be at least 1 (got {job.nodes})")
    if job.gpus_per_node < 0:
        raise JobError(f"--gpus-per-node must be 0 (CPU) or more (got {job.gpus_per_node})")
    if job.variant not in VARIANTS:
        raise JobError(f"unknown variant {job.variant!r}; choose one of {', '.join(VARIANTS)}")
    if job.single_process:
        if job.nodes != 1:
            raise JobError(f"the {job.variant} variant runs on one node; use --nodes 1 (or --variant ddp)")
        if job.variant == "nd" and job.gpus_per_node > 1:
            raise JobError(f"the nd variant uses one GPU; use --gpus-per-node 1 (or --variant dp for "
                           f"{job.gpus_per_node})")
        return
    if job.procs_per_node is not None and job.gpus_per_node and job.procs_per_node != job.gpus_per_node:
        raise JobError(f"--procs-per-node {job.procs_per_node} does not match --gpus-per-node "
                       f"{job.gpus_per_node}: DDP runs one process per GPU")
    if job.procs_per_node is not None and job.procs_per_node < 1:
        raise JobError(f"--procs-per-node must be at least 1 (got {job.procs_per_node})")


def check_resources(job: JobShape) -> None:
    """The site options, memory, time limit, CPUs and training flags can be written down and mean something."""
    for label, value in (("--name", job.name), ("--partition", job.partition), ("--account", job.account),
                         ("--qos", job.qos), ("--constraint", job.constraint), ("--mem", job.mem),
                         ("--time", job.time)):
        if value is not None:
            check_directive(label, value)
    if job.mem is not None and not _MEM.fullmatch(job.mem):
        raise JobError(f"--mem {job.mem!r} must be a number with an optional K/M/G/T suffix (e.g. 64G)")
    parse_time(job.time)
    if job.cpus_per_task is not None and job.cpus_per_task < 1:
        raise JobError(f"--cpus-per-task must be at least 1 (got {job.cpus_per_task})")
    for arg in job.train_args:
        check_text("training argument", arg)


def check(job: JobShape) -> None:
    """Raise JobError (one line) for a shape that cannot work."""
    check_layout(job)
    check_resources(job)


def managed_flags(managed: Dict[str, str]) -> Dict[str, str]:
    """Each training flag (every spelling the trainers accept) of a setting in ``managed`` (setting -> what
    to use instead) -> what to use instead."""
    from hpc_imagenet.imagenet import config  # only the flag table; no torch import

    return {flag: managed[f.name] for _, f in config.setting_fields() if f.name in managed
            for flag in f.metadata["flags"]}


def check_unmanaged(train_args: Sequence[str], managed: Dict[str, str], owner: str, why: str = "") -> None:
    """A training flag that ``owner`` sets itself is refused, naming what to use instead (and ``why``)."""
    table = managed_flags(managed)
    for arg in train_args:
        flag = arg.split("=", 1)[0]
        if flag in table:
            raise JobError(f"training flag {flag} is {owner}: use {table[flag]}" + (f" ({why})" if why else ""))


# ---------------------------------------------------------------------------------------------
# the command line


def add_options(parser: argparse.ArgumentParser, defaults: JobShape) -> None:
    """One option per field (``--gpus-per-node`` for ``gpus_per_node``), its default the tool's own."""
    for f in fields(JobShape):
        if "help" in f.metadata:
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=f.metadata["type"],
                                default=getattr(defaults, f.name), help=f.metadata["help"])


def option_names() -> List[str]:
    """The fields that are options of both command lines."""
    return [f.name for f in fields(JobShape) if "help" in f.metadata]
