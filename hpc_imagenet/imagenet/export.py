"""``python -m hpc_imagenet.imagenet.export RUN_DIR``: a finished run's weights for torchvision, with a model card.

Reads the run folder the engine wrote (``model_best.pth.tar``, else ``checkpoint.pth.tar``, and
``run.json``) and writes into ``RUN_DIR/export`` (or ``--out``), each file atomically:

- ``model.pth``: a plain state dict that ``torchvision.models.get_model(ARCH, num_classes=N)``
  loads with ``strict=True`` (the DDP ``module.`` and torch.compile ``_orig_mod.`` prefixes removed);
- ``model_ema.pth``: the same for the weights' moving average, where the checkpoint has one;
- ``model.safetensors`` / ``model_ema.safetensors``: the same tensors in safetensors;
- ``model_card.json`` and ``MODEL_CARD.md``: what was trained, how (the recipe and its sources), to
  what accuracy, how long it took, from which commit and command (:mod:`hpc_imagenet.imagenet.export_card`).

Before anything is written each state dict is loaded, strictly, into a freshly built torchvision model,
so an export that succeeds is one torchvision can load. ``--evaluation NAME=RUN_JSON`` adds the record
of an ``--evaluate`` run of the exported weights (``best``, ``ema``) to the card.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional

import torch

from hpc_imagenet.imagenet.common import files
from hpc_imagenet.imagenet.common.errors import one_line
from hpc_imagenet.imagenet.train import checkpoint

EXPORT_DIR = "export"
WEIGHTS = {"model": "model", "ema": "model_ema"}  # which weights -> file stem
PREFIXES = ("module.", "_orig_mod.")  # DDP/DataParallel, AveragedModel and torch.compile wrappers
EMA_EXTRA = ("n_averaged",)  # AveragedModel's own counter: not a weight of the network


class ExportError(RuntimeError):
    """The run folder cannot be exported; the message is one line naming the problem and the fix."""


def clean_state_dict(state: Dict[str, torch.Tensor], extra: tuple = ()) -> Dict[str, torch.Tensor]:
    """STATE with the wrappers' key prefixes removed (repeatedly: a compiled DDP module has both) and
    the EXTRA keys dropped, its tensors contiguous on the CPU (safetensors needs that)."""
    clean = {}
    for key, value in state.items():
        if key in extra:
            continue
        while key.startswith(PREFIXES):
            key = next(key[len(p):] for p in PREFIXES if key.startswith(p))
        clean[key] = value.detach().cpu().contiguous()
    return clean


def num_classes(state: Dict[str, torch.Tensor]) -> int:
    """The classifier's outputs: the rows of the last 2-D weight (torchvision's models end with it)."""
    matrices = [v for k, v in state.items() if k.endswith("weight") and v.dim() == 2]
    if not matrices:
        raise ExportError("the checkpoint's weights have no classifier layer; it is not a torchvision "
                          "classification model: export a run of imagenet's training scripts")
    return int(matrices[-1].shape[0])


def check_loads(arch: str, state: Dict[str, torch.Tensor], classes: int, what: str) -> None:
    """Load STATE strictly into torchvision's ARCH; a mismatch is an ExportError naming WHAT."""
    import torchvision

    try:
        torchvision.models.get_model(arch, num_classes=classes).load_state_dict(state, strict=True)
    except (RuntimeError, ValueError) as e:
        raise ExportError(f"the {what} weights do not load into torchvision's {arch} "
                          f"({one_line(e)[:200]}); check the run's -a") from None


def source_checkpoint(run_dir: Path) -> Path:
    """The best checkpoint (the run's best validation), else the newest."""
    if not run_dir.is_dir():
        raise ExportError(f"run folder {run_dir} does not exist; pass the --log-dir of a training run")
    for name in (checkpoint.BEST, checkpoint.CHECKPOINT):
        if (run_dir / name).is_file():
            return run_dir / name
    raise ExportError(f"{run_dir} has no {checkpoint.BEST} or {checkpoint.CHECKPOINT}; pass the --log-dir of a "
                      "training run that finished at least one epoch")


def read_record(path: Path, what: str) -> dict:
    """A run.json-shaped file, or an ExportError naming it."""
    try:
        record = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ExportError(f"{path} does not exist; {what}") from None
    except (OSError, ValueError) as e:
        raise ExportError(f"cannot read {path} ({one_line(e)[:120]}); {what}") from None
    if not isinstance(record, dict):
        raise ExportError(f"{path} is not a run record; {what}")
    return record


def weights_of(ckpt: dict) -> Dict[str, Dict[str, torch.Tensor]]:
    """{'model': ..., 'ema': ...} (the EMA only where the checkpoint has one), cleaned."""
    if not isinstance(ckpt.get("model"), dict):
        raise ExportError("the checkpoint has no 'model' weights; it is not a training checkpoint of this tool")
    found = {"model": clean_state_dict(ckpt["model"])}
    if isinstance(ckpt.get("ema"), dict):
        found["ema"] = clean_state_dict(ckpt["ema"], EMA_EXTRA)
    return found


def _safetensors_save():
    try:
        from safetensors.torch import save
    except ImportError:
        raise ExportError("the safetensors package is missing: pip install safetensors (or pass "
                          "--no-safetensors)") from None
    return save


def _torch_bytes(state: Dict[str, torch.Tensor]) -> bytes:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def write_weights(out: Path, weights: Dict[str, Dict[str, torch.Tensor]], arch: str,
                  safetensors: bool = True) -> Dict[str, dict]:
    """Check each state dict loads into torchvision, then write it (and its safetensors twin);
    returns the card's ``weights`` entry: file names and their SHA-256."""
    classes = num_classes(weights["model"])
    for which, state in weights.items():
        check_loads(arch, state, classes, which)
    save_st = _safetensors_save() if safetensors else None
    written = {}
    for which, state in weights.items():
        stem = WEIGHTS[which]
        entry = {"num_classes": classes}
        blobs = {f"{stem}.pth": _torch_bytes(state)}
        if save_st is not None:
            blobs[f"{stem}.safetensors"] = save_st(state, metadata={"arch": arch, "weights": which})
        for name, data in blobs.items():
            files.write_bytes(out / name, data)
            entry[name.rsplit(".", 1)[1]] = {"file": name, "sha256": _sha256(data), "bytes": len(data)}
        written[which] = entry
    return written


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _evaluations(pairs: List[str]) -> Dict[str, dict]:
    """--evaluation NAME=RUN_JSON, each an --evaluate run's run.json: NAME -> its evaluation row."""
    found = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or not name:
            raise ExportError(f"--evaluation {pair}: give NAME=RUN_JSON, e.g. ema=eval/ema/run.json")
        record = read_record(Path(path), "pass the run.json an --evaluate run wrote")
        if "evaluation" not in record:
            raise ExportError(f"{path} has no evaluation (status {record.get('status')!r}); run the training "
                              "script with --evaluate --resume WEIGHTS and pass that run's run.json")
        found[name] = {**record["evaluation"], "weights": record.get("config", {}).get("checkpoint", {}).get("resume")}
    return found


def export(run_dir: Path, out: Optional[Path] = None, evaluations: Optional[List[str]] = None,
           safetensors: bool = True) -> Path:
    """Export RUN_DIR into OUT (default RUN_DIR/export); returns OUT."""
    from hpc_imagenet.imagenet import export_card

    run_dir = Path(run_dir)
    path = source_checkpoint(run_dir)
    record = read_record(run_dir / "run.json", "the run folder is incomplete: pass the --log-dir of a training run")
    evaluated = _evaluations(evaluations or [])
    try:
        ckpt = checkpoint.load(path)
    except checkpoint.CheckpointError as e:
        raise ExportError(str(e).split(";")[0] + "; the run folder is damaged: export another run, or resume "
                          "training with --resume auto to write a new checkpoint") from None
    arch = ckpt.get("arch") or record.get("config", {}).get("model", {}).get("arch")
    out = Path(out) if out else run_dir / EXPORT_DIR
    weights = write_weights(out, weights_of(ckpt), arch, safetensors)
    card = export_card.build(record, ckpt, path.name, weights, evaluated)
    files.write_json(out / export_card.CARD_JSON, card)
    files.write_text(out / export_card.CARD_MD, export_card.markdown(card))
    return out


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpc_imagenet.imagenet.export", description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path, help="a training run's folder (its --log-dir)")
    p.add_argument("--out", type=Path, help=f"where to write (default RUN_DIR/{EXPORT_DIR})")
    p.add_argument("--evaluation", action="append", default=[], metavar="NAME=RUN_JSON",
                   help="the run.json of an --evaluate run of the exported weights, for the card (repeatable)")
    p.add_argument("--no-safetensors", dest="safetensors", action="store_false",
                   help="write the .pth files only")
    a = p.parse_args(argv)
    try:
        out = export(a.run_dir, a.out, a.evaluation, a.safetensors)
    except ExportError as e:
        print(f"hpc_imagenet.imagenet.export: {e}", file=sys.stderr)
        return 2
    print(f"exported {a.run_dir} -> {out} (model card: {out / 'MODEL_CARD.md'})")
    return 0


if __name__ == "__main__":
    from hpc_imagenet.imagenet.export import main  # under its one name, not a copy
    sys.exit(main())
