"""hpc_imagenet.imagenet.export on a real tiny training run: the exported weights load strictly into torchvision's
model, reproduce the top-1 the engine's --evaluate measured on the same images, match their safetensors
twin, and the model card says what was trained; a missing or damaged run folder is one line."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from hpc_imagenet.imagenet import export
from hpc_imagenet.imagenet.data.demo import generate
from tests.helpers import explain, read_run, script
from tests.warm_start import warm_python

# one xdist worker runs the whole module, so that its one training (the module fixture) runs once
pytestmark = pytest.mark.xdist_group("export")
ARCH = "resnet18"
# 3 epochs of 8 steps at 32 px, seeded: a learned model (97 % here; chance is 25 %), about 6 s on 2 cores.
# Unseeded at LR 0.5 a run could end at chance (1 CI run in ~10)
TRAIN = ["-a", ARCH, "--image-size", "32", "-b", "8", "--workers", "0", "--epochs", "3", "--lr", "0.1", "--seed", "0",
         "--model-ema", "--model-ema-steps", "1", "--model-ema-decay", "0.9", "--eval-weights", "model",
         "--val-resize-size", "40", "--interpolation", "bicubic"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("export")
    data = generate(root / "data", classes=4, train_per_class=16, val_per_class=8)
    run_dir = root / "run"
    proc = warm_python(script("imagenet_nd.py"), *TRAIN, "--log-dir", run_dir, data)
    assert proc.returncode == 0, explain(proc)
    proc = warm_python("-m", "hpc_imagenet.imagenet.export", run_dir)
    assert proc.returncode == 0, explain(proc)
    evaluated = {}
    for stem in ("model", "model_ema"):
        weights = run_dir / "export" / f"{stem}.pth"
        proc = warm_python(script("imagenet_nd.py"), *TRAIN, "--evaluate", "--resume", weights,
                           "--log-dir", root / f"eval_{stem}", data)
        assert proc.returncode == 0, explain(proc)
        evaluated[stem] = read_run(root / f"eval_{stem}")["evaluation"]
    return {"data": data, "run": run_dir, "out": run_dir / "export", "evaluated": evaluated, "root": root}


def _torchvision_top1(weights: Path, val: Path) -> float:
    """Top-1 of WEIGHTS on VAL with torchvision alone, under the run's scoring (resize 40, crop 32, bicubic)."""
    import torchvision
    from torchvision import transforms

    model = torchvision.models.resnet18(num_classes=4)
    model.load_state_dict(torch.load(weights, weights_only=True), strict=True)
    model.eval()
    tf = transforms.Compose([transforms.Resize(40, interpolation=transforms.InterpolationMode.BICUBIC),
                             transforms.CenterCrop(32), transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    data = torchvision.datasets.ImageFolder(val, tf)
    images = torch.stack([image for image, _ in data])
    labels = torch.tensor([label for _, label in data])
    with torch.no_grad():
        return 100.0 * float((model(images).argmax(1) == labels).float().mean())


def test_weights_load_strictly_and_reproduce_the_evaluated_top1(exported):
    record = read_run(exported["run"])
    best = max((r for r in record["epochs"] if "val_top1" in r), key=lambda r: r["val_top1"])
    assert best["val_top1"] > 25.0, "the tiny run learned nothing: the comparison below would prove little"
    # the best checkpoint's weights, evaluated by the engine, score what training recorded for them
    assert exported["evaluated"]["model"]["val_top1"] == pytest.approx(best["val_top1"])
    for stem in ("model", "model_ema"):
        top1 = _torchvision_top1(exported["out"] / f"{stem}.pth", exported["data"] / "val")
        assert top1 == pytest.approx(exported["evaluated"][stem]["val_top1"]), stem


def test_safetensors_hold_the_same_tensors(exported):
    from safetensors.torch import load_file

    for stem in ("model", "model_ema"):
        pth = torch.load(exported["out"] / f"{stem}.pth", weights_only=True)
        st = load_file(exported["out"] / f"{stem}.safetensors")
        assert pth.keys() == st.keys() and not any(k.startswith(("module.", "_orig_mod.")) for k in pth)
        assert all(torch.equal(pth[k], st[k]) for k in pth)
    ema = torch.load(exported["out"] / "model_ema.pth", weights_only=True)
    assert "n_averaged" not in ema


def test_model_card_names_the_run(exported):
    card = json.loads((exported["out"] / "model_card.json").read_text())
    record = read_run(exported["run"])
    assert card["arch"] == ARCH and card["num_classes"] == 4 and card["epochs"] == 3
    assert card["global_batch"] == 8 and card["commit"] == record["environment"]["git_commit"]
    assert card["validation_scoring"] == {"resize": 40, "crop": 32, "interpolation": "bicubic"}
    assert card["training_accuracy"]["top1"] == record["final"]["best_top1"]
    assert card["recipe"]["name"] == "examples" and card["recipe"]["sources"]
    assert "imagenet_nd.py" in card["command"] and card["wall_hours"] > 0
    assert set(card["weights"]) == {"model", "ema"}
    assert [row["val_top1"] for row in card["curve"]] == [row["val_top1"] for row in record["epochs"]]
    md = (exported["out"] / "MODEL_CARD.md").read_text()
    assert "torchvision.models.get_model('resnet18', num_classes=4)" in md and "strict=True" in md
    assert md.count("\n| 3 | ") == 1  # the learning curve's last epoch


def test_card_carries_the_evaluations(exported):
    out = exported["root"] / "with_eval"
    assert export.main([str(exported["run"]), "--out", str(out),
                        "--evaluation", f"ema={exported['root'] / 'eval_model_ema' / 'run.json'}"]) == 0
    card = json.loads((out / "model_card.json").read_text())
    assert card["evaluations"]["ema"]["val_top1"] == exported["evaluated"]["model_ema"]["val_top1"]


def _one_line_error(capsys, *args) -> str:
    assert export.main([str(a) for a in args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    return err


def test_missing_and_damaged_run_folders_are_one_line(exported, tmp_path, capsys):
    assert "does not exist" in _one_line_error(capsys, tmp_path / "nothing")
    damaged = tmp_path / "damaged"
    shutil.copytree(exported["run"], damaged, ignore=shutil.ignore_patterns("export"))
    (damaged / "model_best.pth.tar").write_bytes(b"not a checkpoint")
    assert "damaged" in _one_line_error(capsys, damaged)
    assert not (damaged / "export").exists()
    (damaged / "model_best.pth.tar").unlink()
    (damaged / "run.json").unlink()
    assert "run.json does not exist" in _one_line_error(capsys, damaged)
    assert "NAME=RUN_JSON" in _one_line_error(capsys, exported["run"], "--evaluation", "nonsense")


def test_wrapper_prefixes_and_the_average_counter_are_dropped():
    weights = torch.ones(2)
    state = {"module._orig_mod.fc.weight": weights, "_orig_mod.module.fc.bias": weights, "n_averaged": torch.tensor(3)}
    assert set(export.clean_state_dict(state, export.EMA_EXTRA)) == {"fc.weight", "fc.bias"}
