"""Workloads: determinism per (seed, epoch, index), shapes, latency, jpeg generation and repair, folder errors."""

from __future__ import annotations

import json
import multiprocessing
import pickle
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from engine.config import ConfigError, RunConfig
from engine.workloads import FolderWorkload, JpegWorkload, PyloopWorkload, TensorWorkload
from engine.workloads import jpeg as jpeg_mod


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LOADERLAB_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


@pytest.fixture
def image_tree(tmp_path) -> Path:
    """cats: 3 jpg, dogs: 2 png (one nested), empty: no images, plus a hidden folder and a text file."""
    root = tmp_path / "tree"
    rng = np.random.default_rng(0)
    files = ["cats/a.jpg", "cats/b.JPG", "cats/c.jpeg", "dogs/x.png", "dogs/sub/y.png", ".hidden/z.jpg"]
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)).save(root / rel)
    (root / "empty").mkdir()
    (root / "cats" / "notes.txt").write_text("not an image")
    return root


def make(name: str, **kw):
    classes = {"tensor": TensorWorkload, "pyloop": PyloopWorkload, "jpeg": JpegWorkload, "folder": FolderWorkload}
    return classes[name](RunConfig(workload=name, **{"n_samples": 24, "image_size": 32, **kw}))


ALL = ["tensor", "pyloop", "jpeg", "folder"]


def build(name: str, image_tree: Path, **kw):
    return make(name, folder=str(image_tree), **kw) if name == "folder" else make(name, **kw)


@pytest.mark.parametrize("name", ALL)
def test_sample_is_a_function_of_seed_epoch_index(name, image_tree):
    ds = build(name, image_tree, seed=3)
    x, y = ds[(1, 4)]
    x2, y2 = build(name, image_tree, seed=3)[(1, 4)]  # a fresh instance, same key
    assert torch.equal(x, x2) and y == y2
    assert torch.equal(ds[4][0], ds[(0, 4)][0])  # a plain index is epoch 0
    assert not torch.equal(x, ds[(2, 4)][0])  # another epoch, another augmentation
    assert ds[(2, 4)][1] == y  # ...of the same labelled sample
    assert not torch.equal(x, build(name, image_tree, seed=4)[(1, 4)][0])


@pytest.mark.parametrize("name", ALL)
def test_shapes_dtypes_labels_and_range(name, image_tree):
    ds = build(name, image_tree, image_size=40, num_classes=3)
    assert ds.sample_shape == (3, 40, 40)
    for i in range(len(ds)):
        x, y = ds[(0, i)]
        assert x.shape == ds.sample_shape and x.dtype == torch.float32 and x.is_contiguous()
        assert type(y) is int and 0 <= y < ds.num_classes
    for bad in (len(ds), -1, (0, len(ds)), (-1, 0)):
        with pytest.raises(IndexError):
            ds[bad]


def test_labels_use_num_classes_and_vary():
    for name in ("tensor", "jpeg"):
        labels = {make(name, num_classes=5)[i][1] for i in range(24)}
        assert labels <= set(range(5)) and len(labels) > 1


@pytest.mark.parametrize("name", ["tensor", "jpeg"])
def test_latency_is_slept_per_sample(name):
    ds = make(name, latency_ms=20.0)
    t0 = time.perf_counter()
    for i in range(5):
        ds[i]
    assert time.perf_counter() - t0 >= 0.095  # a lower bound: 5 x 20 ms of sleep


@pytest.mark.parametrize("name", ALL)
def test_pickle_round_trip(name, image_tree):
    ds = build(name, image_tree)
    before = ds[(1, 4)]
    blob = pickle.dumps(ds)
    assert len(blob) < 100_000  # the tensor bank is rebuilt in the receiving process, never shipped
    x, y = pickle.loads(blob)[(1, 4)]
    assert torch.equal(x, before[0]) and y == before[1]


def _first_sample(ds):
    return ds[(2, 7)]


def test_spawned_process_sees_the_same_samples():
    datasets = [make("tensor", work_us=50), make("pyloop", work_us=50), make("jpeg")]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        remote = list(pool.map(_first_sample, datasets))
    for ds, (x, y) in zip(datasets, remote):
        assert torch.equal(x, ds[(2, 7)][0]) and y == ds[(2, 7)][1]


def test_work_us_adds_calibrated_work_without_changing_samples():
    plain, busy = make("tensor"), make("tensor", work_us=1000)
    assert plain.work_units == 0 and busy.work_units > 0
    assert make("tensor", work_us=100).work_units == pytest.approx(busy.work_units / 10, rel=0.01)
    assert torch.equal(plain[(1, 2)][0], busy[(1, 2)][0])
    loop, busy_loop = make("pyloop"), make("pyloop", work_us=1000)
    assert loop.work_units == 0 and busy_loop.work_units > 0
    assert torch.equal(loop[(1, 2)][0], busy_loop[(1, 2)][0])


def test_tensor_bank_memory_is_bounded():
    ds = make("tensor", n_samples=1_000_000, image_size=32)
    assert len(ds) == 1_000_000 and ds.bank_size <= 4096
    big = make("tensor", n_samples=1_000_000, image_size=512)
    assert big.bank_size * 4 * 3 * 512 * 512 <= big.BANK_BYTES
    assert ds[999_999][0].shape == (3, 32, 32)


def test_jpeg_generates_files_and_manifest(data_dir):
    ds = make("jpeg", n_samples=30, seed=1)
    root = data_dir / "datasets" / "jpeg-n30-s1"
    assert ds.root == root
    files = sorted(root.rglob("*.jpg"))
    assert len(files) == 30
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["params"]["n"] == 30 and len(manifest["files"]) == 30
    first = manifest["files"][0]
    assert (root / first["file"]).stat().st_size == first["bytes"] and len(first["sha256"]) == 64
    with Image.open(files[0]) as img:
        assert img.format == "JPEG" and img.size == (256, 256)


def test_jpeg_regenerates_missing_and_corrupt_files(data_dir):
    ds = make("jpeg", n_samples=30)
    sample = ds[(0, 3)]
    manifest = json.loads((ds.root / "manifest.json").read_text())["files"]
    missing, truncated, garbled = (ds.root / manifest[i]["file"] for i in (3, 4, 5))
    original = missing.read_bytes()
    missing.unlink()
    truncated.write_bytes(truncated.read_bytes()[:100])
    make("jpeg", n_samples=30)  # opening checks sizes and repairs
    assert missing.read_bytes() == original
    assert truncated.stat().st_size == manifest[4]["bytes"]
    # same size, not a JPEG any more: only a decode can notice; reading repairs it
    garbled.write_bytes(b"\0" * manifest[5]["bytes"])
    x, _ = ds[(0, 5)]
    assert x.shape == (3, 32, 32) and garbled.read_bytes()[:2] == b"\xff\xd8"
    assert torch.equal(ds[(0, 3)][0], sample[0])


def test_jpeg_concurrent_generation_is_safe(data_dir):
    errors: list[BaseException] = []

    def gen():
        try:
            jpeg_mod.ensure_dataset(40, 9)
        except BaseException as e:  # noqa: BLE001 - surfaced by the assert below
            errors.append(e)

    threads = [threading.Thread(target=gen) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ds = make("jpeg", n_samples=40, seed=9)
    assert len(list(ds.root.rglob("*.jpg"))) == 40 and not list(ds.root.rglob("*.tmp"))
    assert all(ds[i][0].shape == (3, 32, 32) for i in range(40))


def test_jpeg_check_is_cheap_and_reports_disk_space(data_dir, monkeypatch):
    cfg = RunConfig(workload="jpeg", n_samples=1000)
    JpegWorkload.check(cfg)
    assert not (data_dir / "datasets" / "jpeg-n1000-s0").exists()  # check generated nothing
    monkeypatch.setattr(jpeg_mod.shutil, "disk_usage", lambda p: type("U", (), {"free": 1000})())
    with pytest.raises(ConfigError) as e:
        JpegWorkload.check(cfg)
    assert e.value.field == "n_samples" and "LOADERLAB_DATA" in e.value.message


def test_folder_reads_an_image_tree(image_tree):
    ds = make("folder", folder=str(image_tree), n_samples=1000, num_classes=50)
    assert ds.classes == ["cats", "dogs"] and ds.num_classes == 2  # empty and hidden folders skipped
    assert len(ds) == 5  # every image found; n_samples is ignored
    assert sorted(ds[i][1] for i in range(len(ds))) == [0, 0, 0, 1, 1]
    assert ds.paths[-1].endswith("y.png")


def _folder_case(root: Path, case: str) -> str:
    if case == "file":
        (root / "f.txt").write_text("x")
        return str(root / "f.txt")
    if case == "no images":
        (root / "empty" / "cls").mkdir(parents=True)
        return str(root / "empty")
    return {"unset": "", "missing": str(root / "nope")}[case]


@pytest.mark.parametrize(
    "case, words",
    [
        ("unset", "needs --folder"),
        ("missing", "does not exist"),
        ("file", "is a file"),
        ("no images", "no class subfolders"),
    ],
)
def test_folder_errors_name_the_field(tmp_path, case, words):
    cfg = RunConfig(workload="folder", folder=_folder_case(tmp_path, case))
    for call in (FolderWorkload.check, FolderWorkload):
        with pytest.raises(ConfigError) as e:
            call(cfg)
        assert e.value.field == "folder" and words in e.value.message


def test_folder_with_loose_images_says_to_make_class_folders(tmp_path):
    Image.new("RGB", (8, 8)).save(tmp_path / "a.jpg")
    with pytest.raises(ConfigError, match="one subfolder per class") as e:
        FolderWorkload.check(RunConfig(workload="folder", folder=str(tmp_path)))
    assert e.value.field == "folder"


def test_folder_undecodable_image_names_the_file(image_tree):
    (image_tree / "cats" / "a.jpg").write_bytes(b"not a jpeg")
    ds = make("folder", folder=str(image_tree))
    with pytest.raises(RuntimeError, match="a.jpg"):
        ds[0]
