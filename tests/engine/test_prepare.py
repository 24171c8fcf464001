"""python -m hpc_imagenet.imagenet.data.prepare on a small download in ImageNet's official layout (real tar files, real
JPEGs).

The download (studies/benches/archive_set.py) is a tar of per-class tars, a flat validation tar and a devkit
whose meta.mat comes from scipy.io.savemat (shuffled IDs, WordNet inner nodes), or Kaggle's label
files; it includes ImageNet's odd files (a PNG under a .JPEG name, a CMYK JPEG). Checked: every
sample is byte-identical to its source image with the right class; the shards are the very files
python -m hpc_imagenet.imagenet.data.shards writes from the extracted folder, and --format folder is that folder;
devkit and Kaggle labels agree; a process killed with SIGKILL resumes to the same files; each bad
input stops in one line with nothing that looks complete; every backend trains on the result.
"""
import hashlib
import json
import shutil
import signal
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hpc_imagenet.imagenet.common.errors import DataError
from hpc_imagenet.imagenet.data import archives, demo, prepare, sources
from hpc_imagenet.imagenet.data.scan import scan_dataset
from studies.benches import archive_set
from tests.engine import dali_colours
from tests.engine.load import cpu_burners
from tests.helpers import PYTHON, child_env, explain, read_run, run, script
from tests.warm_start import warm_python

WNIDS = ["n03000003", "n01000001", "n02000002"]  # class_000 -> n03..., so sorted WNIDs reorder them
PNG_NAME, CMYK_NAME = "n01000001_2933.JPEG", "n02000002_77.JPEG"
SHARD_MB = "0.001"  # about one image a shard: many shards, so a kill lands between two


def _prepare(archive_dir, dst, *extra, **kw):
    return run([PYTHON, "-m", "hpc_imagenet.imagenet.data.prepare", str(archive_dir), str(dst), "--workers", "2",
                "--shard-size", SHARD_MB, *map(str, extra)], **kw)


def _sha(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """An ImageFolder with WNID classes (3 x 12 train, 3 x 4 val) plus a PNG and a CMYK JPEG in train."""
    root = demo.generate(tmp_path_factory.mktemp("source"), classes=3, train_per_class=12, val_per_class=4,
                              size=(72, 56))
    for split in ("train", "val"):
        for i, wnid in enumerate(WNIDS):
            (root / split / f"class_{i:03d}").rename(root / split / wnid)
    with Image.open(next((root / "train" / WNIDS[0]).iterdir())) as im:
        im.save(root / "train" / "n01000001" / PNG_NAME, "PNG")  # a PNG under a .JPEG name
        im.convert("CMYK").save(root / "train" / "n02000002" / CMYK_NAME, "JPEG", quality=90)
    return root


def _expected(source: Path):
    """{sha of the image bytes: (split, wnid)} of the source folder."""
    return {_sha(f.read_bytes()): (split, f.parent.name) for split in ("train", "val")
            for f in (source / split).rglob("*.JPEG")}


@pytest.fixture(scope="module")
def download(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("download")
    archive_set.write_download(source, out, "devkit")
    return out


@pytest.fixture(scope="module")
def kaggle(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("kaggle")
    archive_set.write_download(source, out, "kaggle")
    return out


@pytest.fixture(scope="module")
def prepared(download, tmp_path_factory):
    dst = tmp_path_factory.mktemp("prepared") / "shards"
    proc = _prepare(download, dst, "--verify")
    assert proc.returncode == 0, explain(proc)
    return dst


def _samples(root: Path):
    """[(split, class, sha of the bytes)] in index order."""
    classes, index = sources.load_index(str(root))
    return classes, [(split, index[split].target(i), _sha(index[split].read(i)))
                     for split in sources.SPLITS for i in range(len(index[split]))]


def _same_tree(a: Path, b: Path, skip=()) -> None:
    """The same files (hidden ones and SKIP aside), byte for byte."""
    def files(root):
        return sorted(p.relative_to(root) for p in root.rglob("*")
                      if p.is_file() and not p.name.startswith(".") and p.name not in skip)
    assert files(a) == files(b)
    files = files(a)
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)


# ---------------------------------------------------------------- correct output

def test_every_sample_is_its_source_image_with_its_class(source, prepared):
    classes, samples = _samples(prepared)
    expected = _expected(source)
    assert classes == sorted(WNIDS)
    assert sorted(sha for _, _, sha in samples) == sorted(expected)  # each image once, byte-identical
    assert all(expected[sha] == (split, classes[target]) for split, target, sha in samples)
    with np.load(prepared / sources.INDEX_NAME) as z:
        header = json.loads(z["header"].tobytes())
    assert header["class_names"] == [archive_set.class_name(w) for w in classes]


def _extract_like_valprep(download: Path, out: Path) -> None:
    """What a user does by hand: untar everything, then move each val image into its class folder."""
    with tarfile.open(download / archives.TRAIN_TAR) as outer:
        for member in outer:
            with tarfile.open(fileobj=outer.extractfile(member)) as inner:
                inner.extractall(out / "train" / member.name[:-4], filter="data")
    with tarfile.open(download / archives.VAL_TAR) as val:
        val.extractall(out / "val", filter="data")
    labels, _ = archives.devkit_labels(str(download / archives.DEVKIT))
    for f in list((out / "val").iterdir()):
        (out / "val" / labels[int(f.stem.split("_")[-1])]).mkdir(exist_ok=True)
        f.rename(out / "val" / labels[int(f.stem.split("_")[-1])] / f.name)


def test_same_files_as_extracting_then_imagenet_shards_and_folder_as_valprep(download, prepared, tmp_path):
    _extract_like_valprep(download, tmp_path / "extracted")
    proc = run([PYTHON, "-m", "hpc_imagenet.imagenet.data.shards", tmp_path / "extracted", tmp_path / "from_folder",
                "--workers", "2",
                "--shard-size", SHARD_MB])
    assert proc.returncode == 0, explain(proc)
    shard_files = sorted(p.name for p in prepared.glob("*.tar"))
    assert len(shard_files) > 10 and shard_files == sorted(p.name for p in (tmp_path / "from_folder").glob("*.tar"))
    assert all((prepared / n).read_bytes() == (tmp_path / "from_folder" / n).read_bytes() for n in shard_files)
    with np.load(prepared / sources.INDEX_NAME) as a, np.load(tmp_path / "from_folder" / sources.INDEX_NAME) as b:
        assert all(np.array_equal(a[k], b[k]) for k in a.files if k != "header")
    proc = _prepare(download, tmp_path / "folder", "--format", "folder")
    assert proc.returncode == 0, explain(proc)
    _same_tree(tmp_path / "extracted", tmp_path / "folder", skip=(prepare.NAMES_FILE,))
    assert (tmp_path / "folder" / prepare.NAMES_FILE).read_text().splitlines()[0] == \
        f"n01000001\t{archive_set.class_name('n01000001')}"


def test_kaggle_labels_give_the_same_shards(kaggle, prepared, tmp_path):
    proc = _prepare(kaggle, tmp_path / "s")
    assert proc.returncode == 0, explain(proc)
    assert _samples(tmp_path / "s") == _samples(prepared)


def test_a_killed_import_resumes_to_the_same_files(download, prepared, tmp_path):
    dst = tmp_path / "s"
    cmd = [PYTHON, "-m", "hpc_imagenet.imagenet.data.prepare", download, dst, "--workers", "1",
           "--shard-size", SHARD_MB]
    proc = subprocess.Popen([str(c) for c in cmd], env=child_env(), stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:  # plain progress lines (no terminal): kill once the first shard is written
        if " shards, " in line:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert (not (dst / sources.INDEX_NAME).exists()
            and 0 < len(list(dst.glob("*.tar"))) < len(list(prepared.glob("*.tar"))))
    with pytest.raises(DataError):
        sources.load_index(str(dst))
    again = run([str(c) for c in cmd])
    assert again.returncode == 0, explain(again)
    assert not list(dst.glob("*.tmp"))
    _same_tree(prepared, dst)


def test_an_interrupted_folder_import_resumes_and_never_looks_complete(download, tmp_path, capsys):
    full, dst = tmp_path / "full", tmp_path / "dst"
    assert prepare.main([str(download), str(full), "--format", "folder", "--workers", "1"]) == 0
    shutil.copytree(full, dst)
    # what a kill leaves: no classes.txt, the last class folder half-written under its hidden temp name
    (dst / prepare.NAMES_FILE).unlink()
    partial = dst / "val" / ".n03000003.tmp"
    (dst / "val" / "n03000003").rename(partial)
    next(partial.iterdir()).unlink()
    with pytest.raises(DataError, match="different class folders"):
        scan_dataset(str(dst))  # training refuses it: train/ has a class that val/ lacks
    assert prepare.main([str(download), str(dst), "--format", "folder", "--workers", "1"]) == 0
    assert not partial.exists()
    _same_tree(full, dst)


def test_verify_archives_compares_the_published_md5(download, tmp_path, monkeypatch):
    """The real command under CPU load (where the old worker pool hung on this error about 1 run in 3);
    tests/engine/test_job_runners.py repeats the runner 50 times."""
    with cpu_burners():
        proc = _prepare(download, tmp_path / "s", "--verify-archives", timeout=300)
    assert proc.returncode == 1 and not (tmp_path / "s" / sources.INDEX_NAME).exists()
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and "not the published" in line and "download it" in line
    for name in (archives.TRAIN_TAR, archives.VAL_TAR, archives.DEVKIT):
        monkeypatch.setitem(archives.MD5, name, archives.md5(str(download / name)))
        assert archives.check_md5(str(download / name)) == str(download / name)


# ---------------------------------------------------------------- bad input

def _copy(download: Path, dst: Path) -> Path:
    shutil.copytree(download, dst)
    return dst


def _fails(capsys, archive_dir: Path, dst: Path, *expected: str) -> None:
    """The command line, run in this process (the subprocess tests cover the entry point)."""
    capsys.readouterr()
    code = prepare.main([str(archive_dir), str(dst), "--workers", "2", "--shard-size", SHARD_MB])
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert code == 1 and last.startswith("error: ") and all(e in last for e in expected), err
    assert not (dst / sources.INDEX_NAME).exists()


def test_a_missing_or_truncated_archive_is_one_line(download, tmp_path, capsys):
    missing = _copy(download, tmp_path / "missing")
    (missing / archives.VAL_TAR).unlink()
    _fails(capsys, missing, tmp_path / "a", f"{archives.VAL_TAR} is missing", "image-net.org")
    for name, keep in ((archives.TRAIN_TAR, 0.6), (archives.VAL_TAR, 0.5), (archives.TRAIN_TAR, None)):
        cut = _copy(download, tmp_path / f"cut-{name}-{keep}")
        path = cut / name
        payload = path.read_bytes()
        # None: cut right after the last member, where only the end-of-archive blocks are missing
        size = int(len(payload) * keep) if keep else payload.rstrip(b"\0").__len__() + 100
        path.write_bytes(payload[:size])
        _fails(capsys, cut, tmp_path / f"out-{name}-{keep}", name, "download it")


def _edit_kaggle(kaggle: Path, dst: Path, edit) -> Path:
    out = _copy(kaggle, dst)
    rows = (out / archives.KAGGLE_VAL).read_text().splitlines(keepends=True)
    (out / archives.KAGGLE_VAL).write_text("".join(edit(rows)))
    return out


def test_labels_that_do_not_fit_the_images_are_one_line(kaggle, download, tmp_path, capsys):
    short = _edit_kaggle(kaggle, tmp_path / "short", lambda rows: rows[:-1])
    _fails(capsys, short, tmp_path / "a", "labels 11 validation images", "holds 12")
    stranger = _edit_kaggle(kaggle, tmp_path / "stranger",
                            lambda rows: [rows[0], rows[1].replace(rows[1].split(",")[1].split()[0], "n09999999")]
                            + rows[2:])
    _fails(capsys, stranger, tmp_path / "b", "n09999999", "no training class")
    devkit = _copy(download, tmp_path / "devkit")
    (devkit / archives.DEVKIT).write_bytes((download / archives.DEVKIT).read_bytes()[:200])
    _fails(capsys, devkit, tmp_path / "c", archives.DEVKIT)


def test_a_corrupt_image_is_named_or_skipped(source, tmp_path, capsys):
    src = tmp_path / "src"
    shutil.copytree(source, src)
    bad = src / "train" / "n03000003" / "train_000_00005.JPEG"
    bad.write_bytes(b"this is not an image")
    archive_set.write_download(src, tmp_path / "dl", "devkit")
    name = f"{archives.TRAIN_TAR}/n03000003.tar/train_000_00005.JPEG"
    _fails(capsys, tmp_path / "dl", tmp_path / "a", f"cannot read image {name}", "--skip-bad-images")
    proc = _prepare(tmp_path / "dl", tmp_path / "b", "--skip-bad-images")
    assert proc.returncode == 0, explain(proc)
    assert json.loads(proc.stdout.splitlines()[0])["skipped"] == 1 and name in proc.stderr
    _, index = sources.load_index(str(tmp_path / "b"))
    assert len(index["train"]) == 3 * 12 + 2 - 1


# ---------------------------------------------------------------- training on the result, odd files included

def _backends():
    out = ["pil", "baseline", "fast", "device"]
    return out + (["dali"] if dali_colours._has_dali() else [])


@pytest.mark.parametrize("backend", _backends())
def test_every_backend_trains_on_the_prepared_shards_with_the_odd_files(prepared, backend, tmp_path):
    """One epoch reads every training image, the PNG and the CMYK JPEG included; a sample that does not
    decode would stop the run (no --skip-bad-images)."""
    proc = warm_python(script("imagenet_nd.py"), "-a", "resnet18", "--image-size", "64", "-b", "8", "--workers", "1",
                  "--data-backend", backend, "--epochs", "1", "--seed", "0", "--log-dir", tmp_path / "run",
                  prepared, timeout=600)
    assert proc.returncode == 0, explain(proc)
    assert "skipping" not in proc.stderr
    record = read_run(tmp_path / "run")
    assert record["status"] == "finished", record
