"""Report section "Apex AMP against native AMP": the loss of every step side by side, and the speed.

The runs are those of ``results/gpu_session.sh`` stage ``parity``: the same seed, steps and
deterministic cuDNN, once with ``--amp-backend native`` and once with ``--amp-backend apex``, each
printing (and so logging to TensorBoard) at every step. The per-step losses are read back from each
run's TensorBoard events with TensorBoard's own reader; the tolerance asked for is stated
in the table's heading and judged on the largest difference of any step.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from hpc_imagenet.harness.core.kinds import Record
from hpc_imagenet.harness.report.common import REPO, fmt, md_table
from hpc_imagenet.harness.report.curves import read_scalars
from studies.benches import words

STEP_LOSS = "Step/loss"
TOLERANCE = 1e-3  # relative, per step: fp16 rounding of the same arithmetic in a different order stays below
BACKENDS = ("native", "apex")


def _flag(record: Record, name: str) -> Optional[str]:
    args = list(record.point.extra_args or [])
    return args[args.index(name) + 1] if name in args[:-1] else None


def step_losses(record: Record) -> List[float]:
    """The per-step training loss a run logged to TensorBoard (empty when it kept no events)."""
    if not record.run_dir:
        return []
    return [value for _, value in read_scalars(REPO / record.run_dir, [STEP_LOSS]).get(STEP_LOSS, [])]


def _pairs(train: Sequence[Record]) -> Dict[Tuple[str, str], Dict[str, dict]]:
    """(GPU, level) -> backend -> the newest seeded, deterministic run of that backend."""
    out: Dict[Tuple[str, str], Dict[str, dict]] = {}
    for r in sorted(train, key=lambda r: r.time):
        backend = _flag(r, "--amp-backend")
        if (r.status == "ok" and r.on_gpu and backend in BACKENDS and _flag(r, "--seed") is not None
                and "--deterministic" in (r.point.extra_args or [])):
            key = (r.environment.gpu_name or "?", r.point.precision)
            out.setdefault(key, {})[backend] = r
    return out


COLUMNS = ("GPU", "level", "steps", "identical steps", "largest relative difference", "<= {tolerance:g}",
           "last loss native / apex", "images/s native / apex", "Apex", "records")


def parity_section(train: Sequence[Record]) -> str:
    rows = []
    for (gpu, level), runs in sorted(_pairs(train).items()):
        native, apex = runs.get("native"), runs.get("apex")
        if not (native and apex):
            continue
        a, b = step_losses(native), step_losses(apex)
        steps = min(len(a), len(b))
        if not steps:
            continue
        worst = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a[:steps], b[:steps]))
        same = sum(x == y for x, y in zip(a[:steps], b[:steps]))
        rows.append([gpu, level, steps, f"{same}/{steps}", f"{worst:.2e}", "yes" if worst <= TOLERANCE else "no",
                     f"{a[steps - 1]:.4f} / {b[steps - 1]:.4f}",
                     f"{fmt(native.metrics.images_per_s)} / {fmt(apex.metrics.images_per_s)}",
                     apex.note or "-", f"{native.source}, {apex.source}"])
    if not rows:
        return ""
    return words("amp_parity.section", tolerance=TOLERANCE,
                 table=md_table(COLUMNS, rows, tolerance=TOLERANCE))
