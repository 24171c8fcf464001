"""The model card of an export (``hpc_imagenet.imagenet.export``): one JSON document, and the same as Markdown.

Everything on it comes from what the run wrote (run.json and the checkpoint), the recipe file it
named, and the optional ``--evaluate`` records of the exported weights: nothing is measured here.
"""
from __future__ import annotations

from typing import Dict, Optional

from hpc_imagenet.imagenet.data.decode.base import val_resize
from hpc_imagenet.imagenet.recipes import RECIPES

CARD_JSON = "model_card.json"
CARD_MD = "MODEL_CARD.md"
CURVE = ("epoch", "train_loss", "train_top1", "val_top1", "val_top5", "lr", "elapsed_s")  # per epoch, from run.json


def _scoring(config: dict) -> dict:
    """The validation transform the run scored with: short side resized, centre crop, interpolation."""
    data = config.get("data", {})
    crop = data.get("val_crop_size") or data.get("image_size") or 224
    return {"resize": data.get("val_resize_size") or val_resize(crop), "crop": crop,
            "interpolation": data.get("interpolation", "bilinear")}


def _recipe(config: dict) -> dict:
    name = config.get("run", {}).get("recipe")
    recipe = RECIPES.get(name) if name else None
    if recipe is None:
        return {"name": name, "config_file": config.get("run", {}).get("config")}
    return {"name": name, "published_top1": recipe.top1, "published_batch": recipe.published_batch,
            "sources": [{"cites": s.cites, "url": s.url, "where": s.where} for s in recipe.sources],
            "note": recipe.note}


def _training_accuracy(record: dict) -> dict:
    """The best validation of the training run and the top-5 of that same evaluation."""
    rows = [r for r in record.get("epochs", []) if "val_top1" in r]
    best = max(rows, key=lambda r: r["val_top1"], default=None)
    if best is None:
        return {"top1": None, "top5": None, "epoch": None, "weights": None}
    return {"top1": best["val_top1"], "top5": best["val_top5"], "epoch": best["epoch"] + 1,
            "weights": best.get("val_weights", "model"), "images": best.get("val_samples")}


def build(record: dict, ckpt: dict, checkpoint_name: str, weights: Dict[str, dict],
          evaluations: Dict[str, dict]) -> dict:
    """The card's JSON document (RECORD: run.json; CKPT: the exported checkpoint)."""
    config = record.get("config", {})
    env, final, dist = record.get("environment", {}), record.get("final", {}), record.get("dist", {})
    world = int(dist.get("world_size") or 1)
    wall_s = float(final.get("elapsed_s") or ckpt.get("elapsed_s") or 0.0)
    return {
        "schema": 1,
        "arch": ckpt.get("arch"),
        "num_classes": weights["model"]["num_classes"],
        "load": f"torchvision.models.get_model({ckpt.get('arch')!r}, num_classes={weights['model']['num_classes']})",
        "weights": weights,
        "checkpoint": {"file": checkpoint_name, "epoch": ckpt.get("epoch"), "best_top1": ckpt.get("best_top1")},
        "recipe": _recipe(config),
        "validation_scoring": _scoring(config),
        "training_accuracy": _training_accuracy(record),
        "evaluations": evaluations,
        "epochs": final.get("epochs_run", ckpt.get("epoch")),
        "planned_epochs": config.get("optim", {}).get("epochs"),
        "status": record.get("status"),
        "global_batch": record.get("global_batch"),
        "world_size": world,
        "device": dist.get("device"),
        "precision": record.get("precision", {}).get("label"),
        "wall_hours": wall_s / 3600.0,  # training and validation, as the run's clock counts it
        "device_hours": wall_s * world / 3600.0,  # one device per process: GPU hours on GPUs
        "gpu_hours": wall_s * world / 3600.0 if dist.get("device") == "cuda" else None,
        "commit": env.get("git_commit"),
        "command": env.get("command"),
        "curve": [{k: row.get(k) for k in CURVE} for row in record.get("epochs", [])],
        "torch": env.get("torch"),
        "torchvision": env.get("torchvision"),
    }


def _num(value: Optional[float], spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _pct(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{value:.2f} %"


def markdown(card: dict) -> str:
    """MODEL_CARD.md: the card for people, with the three lines that load the weights."""
    acc, scoring, recipe = card["training_accuracy"], card["validation_scoring"], card["recipe"]
    hours = "GPU hours" if card["device"] == "cuda" else f"{card['device']} process hours"
    lines = [f"# {card['arch']} trained with imagenet ({recipe.get('name') or 'custom'} recipe)", "",
             "```python", "import torch, torchvision",
             f"model = {card['load']}",
             "model.load_state_dict(torch.load('model.pth', weights_only=True), strict=True)", "```", "",
             "| | |", "|---|---|",
             f"| architecture | torchvision `{card['arch']}`, {card['num_classes']} classes |",
             f"| best validation top-1 / top-5 | {_pct(acc['top1'])} / {_pct(acc['top5'])} "
             f"({acc['weights']} weights, epoch {acc['epoch']}) |"]
    for name, row in card["evaluations"].items():
        lines.append(f"| evaluated: {name} | top-1 {_pct(row.get('val_top1'))}, top-5 {_pct(row.get('val_top5'))} "
                     f"on {row.get('val_samples')} images |")
    lines += [f"| validation scoring | resize {scoring['resize']}, centre crop {scoring['crop']}, "
              f"{scoring['interpolation']} |",
              f"| epochs | {card['epochs']} of {card['planned_epochs']} ({card['status']}) |",
              f"| global batch | {card['global_batch']} ({card['world_size']} processes, {card['precision']}) |",
              f"| wall hours | {card['wall_hours']:.4g} |",
              f"| {hours} | {card['device_hours']:.4g} |",
              f"| commit | `{card['commit']}` |",
              f"| command | `{card['command']}` |",
              f"| the recipe's published ResNet-50 top-1 | {_pct(recipe.get('published_top1'))} |", ""]
    files = [f"`{e[kind]['file']}`" for e in card["weights"].values() for kind in ("pth", "safetensors") if kind in e]
    lines += [f"Files: {', '.join(files)} (from `{card['checkpoint']['file']}`).", ""]
    lines += _curve_lines(card["curve"])
    if recipe.get("sources"):
        lines += ["## Recipe sources", ""] + [f"- {s['cites']}: <{s['url']}> ({s['where']})" for s in recipe["sources"]]
        lines.append("")
    return "\n".join(lines)


def _curve_lines(curve: list) -> list:
    """The per-epoch table (the run's learning curve), or nothing for a run without epochs."""
    if not curve:
        return []
    rows = [f"| {r['epoch'] + 1} | {_num(r['train_loss'])} | {_num(r['train_top1'])} | {_num(r['val_top1'])} | "
            f"{_num(r['val_top5'])} | {_num(r['lr'], '.4g')} | {_num(r['elapsed_s'], '.0f')} |" for r in curve]
    return ["## Learning curve", "", "| epoch | train loss | train top-1 | val top-1 | val top-5 | lr | elapsed (s) |",
            "|---|---|---|---|---|---|---|", *rows, ""]
