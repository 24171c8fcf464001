"""SLURM's compressed lists, expanded as ``scontrol show hostnames`` does: host lists
(``node[01-04,07]``) and task counts per node (``2(x3),1``). Hand-written: the format is small and no
maintained parser exists outside SLURM's own tools, which a compute node's Python may not reach."""
from __future__ import annotations

import re
from typing import List

from hpc_imagenet.launch.errors import LaunchError

_BRACKET = re.compile(r"\[([^\[\]]*)\]")


def _split_top_level(spec: str) -> List[str]:
    """Split at commas that are not inside brackets: 'a[1-2,4],b3' -> ['a[1-2,4]', 'b3']."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(spec):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth not in (0, 1):
            raise LaunchError(f"cannot parse hostlist {spec!r}: unbalanced brackets")
        if ch == "," and depth == 0:
            parts.append(spec[start:i])
            start = i + 1
    if depth:
        raise LaunchError(f"cannot parse hostlist {spec!r}: unbalanced brackets")
    parts.append(spec[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_range(body: str, spec: str) -> List[str]:
    """'01-03,7' -> ['01', '02', '03', '7']; the width of the low end sets the zero padding."""
    out = []
    for item in body.split(","):
        lo, sep, hi = item.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise LaunchError(f"cannot parse hostlist {spec!r}: bad range {item!r}")
        if sep and int(hi) < int(lo):
            raise LaunchError(f"cannot parse hostlist {spec!r}: range {item!r} runs backwards")
        out += [str(n).zfill(len(lo)) for n in range(int(lo), int(hi if sep else lo) + 1)]
    return out


def expand_hostlist(spec: str) -> List[str]:
    """Expand a SLURM hostlist, like ``scontrol show hostnames``.

    ``node[01-04,07]`` -> node01 node02 node03 node04 node07; ``gpu-a[1-2],gpu-b3`` -> gpu-a1
    gpu-a2 gpu-b3; several bracket groups in one name give every combination (``r[1-2]n[1-2]``).
    """
    hosts: List[str] = []
    for item in _split_top_level(spec):
        names = [""]
        pos = 0
        for match in _BRACKET.finditer(item):
            literal = item[pos:match.start()]
            names = [n + literal + r for n in names for r in _expand_range(match.group(1), spec)]
            pos = match.end()
        tail = item[pos:]
        if "[" in tail or "]" in tail:
            raise LaunchError(f"cannot parse hostlist {spec!r}: unbalanced brackets")
        hosts += [n + tail for n in names]
    if not hosts:
        raise LaunchError(f"empty hostlist {spec!r}")
    return hosts


def expand_tasks_per_node(spec: str) -> List[int]:
    """SLURM's compressed task counts: ``2(x3),1`` -> [2, 2, 2, 1]."""
    counts: List[int] = []
    for item in spec.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if not match:
            raise LaunchError(f"cannot parse SLURM tasks-per-node {spec!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts
