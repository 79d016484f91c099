"""engine.measure.sampler: the sampled memory covers child processes (loader workers), not just the run itself,
counts pages they share copy-on-write once (PSS), and NVML failures drop GPU fields, not the sampler.

NVML is faked here (a stand-in pynvml module) only to drive the error handling; the GPU test uses the real one.
"""

from __future__ import annotations

import contextlib
import mmap
import multiprocessing
import subprocess
import sys
import time
import types

import psutil
import pytest
import torch

from engine.measure import nvml
from engine.measure.sampler import Sampler
from engine.runlog import RunLog, read_events

MB = 2**20
# A child that makes 200 MiB resident (bytes repetition writes every page), says so, and waits for stdin to close.
_CHILD = "import sys; block = b'\\x01' * (200 * 2**20); print('ready', flush=True); sys.stdin.read()"
# Maps a file shared, reads every page, says so, and waits to be killed (10 min at most).
_SHARER = (
    "import mmap, sys, time; f = open(sys.argv[1], 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ); "
    "sum(m[i] for i in range(0, len(m), 4096)); print('ready', flush=True); time.sleep(600)"
)
# Starts three sharers in their own sessions and exits: orphaned, they belong to no tree of ours.
_ORPHANS = (
    "import subprocess, sys; ps = [subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]], "
    "stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True, text=True) for _ in range(3)]; "
    "[p.stdout.readline() for p in ps]; print(' '.join(str(p.pid) for p in ps))"
)


@pytest.fixture
def pages_shared_outside_the_tree(tmp_path):
    """This process maps 256 MiB that three processes outside its tree map too, as the suite's other workers
    map the same CUDA torch libraries on a GPU box: its RSS counts them whole, its PSS a quarter of them."""
    path = tmp_path / "shared.bin"
    path.write_bytes(b"\x02" * (256 * MB))
    out = subprocess.run(
        [sys.executable, "-c", _ORPHANS, _SHARER, str(path)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    pids = [int(p) for p in out.split()]
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as mapped:
        sum(mapped[i] for i in range(0, len(mapped), 4096))  # resident in this process too
        try:
            yield
        finally:
            for pid in pids:
                with contextlib.suppress(psutil.Error):
                    psutil.Process(pid).kill()


def test_sampler_sees_child_process_memory(tmp_path, pages_shared_outside_the_tree):
    # NOTE: the baseline is this process's PSS, what the sampler sums, not its RSS: pages it shares with
    # processes outside the run (libraries, here a shared file) are a share in PSS and whole in RSS, so an
    # RSS baseline sat above the tree's PSS on a GPU box (868 MiB RSS) and hid the children's 400 MiB
    parent_pss = psutil.Process().memory_full_info().pss
    children = [
        subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        with RunLog(tmp_path / "run") as log, Sampler(log, hz=20.0, flush_every_s=0.2) as sampler:
            for child in children:
                assert child.stdout.readline().strip() == "ready"
            time.sleep(0.5)  # about 10 samples with both children holding their memory
        summary = sampler.summary()
    finally:
        for child in children:
            child.stdin.close()
            child.wait(timeout=30)
    # two children x 200 MiB on top of this process
    assert summary["peak_rss_bytes"] > parent_pss + 300 * MB
    assert summary["mean_cpu_pct"] is not None
    rows = [r for e in read_events(tmp_path / "run") if e["type"] == "samples" for r in e["rows"]]
    assert len(rows) >= 5
    assert max(r[2] for r in rows) == summary["peak_rss_bytes"]  # [t, cpu, rss, gpu_util, gpu_mem]
    assert rows[0][3] is None  # no GPU asked for: no GPU columns
    assert summary["peak_memory_kind"] == "pss"


def test_sampler_off_writes_nothing(tmp_path):
    with RunLog(tmp_path / "run") as log, Sampler(log, hz=0.0) as sampler:
        time.sleep(0.1)
    assert sampler.summary() == {"peak_rss_bytes": None, "mean_cpu_pct": None, "peak_memory_kind": None}
    assert not [e for e in read_events(tmp_path / "run") if e["type"] == "samples"]


def _sleep_forever(conn):
    conn.send("ready")
    conn.recv()  # until the parent says stop


def test_copy_on_write_pages_of_forked_workers_count_once(tmp_path):
    block = b"\x01" * (200 * MB)  # resident in this process; three forked children share it, untouched
    # NOTE: the tree the sampler sums is this process's: its children before the forks count too (a test worker's
    # shared warm parent, engine/run/warm.py, holds torch's imports: 270 MB)
    me = psutil.Process()
    before = sum(p.memory_full_info().pss for p in [me, *me.children(recursive=True)])
    ctx = multiprocessing.get_context("fork")
    pipes = [ctx.Pipe() for _ in range(3)]
    children = [ctx.Process(target=_sleep_forever, args=(child,)) for _, child in pipes]
    for c in children:
        c.start()
    try:
        for parent, _ in pipes:
            assert parent.recv() == "ready"
        with RunLog(tmp_path / "run") as log, Sampler(log, hz=20.0, flush_every_s=0.2) as sampler:
            time.sleep(0.5)
        peak = sampler.summary()["peak_rss_bytes"]
    finally:
        for parent, _ in pipes:
            parent.send("stop")
        for c in children:
            c.join(timeout=30)
    # an RSS sum counts the block four times (> 800 MiB); PSS splits it among its four sharers, so the tree
    # holds it once: not four times (upper bound), and not only this process's quarter of it (lower bound)
    assert before - 50 * MB < peak < before + 150 * MB
    del block


class _NVMLError(Exception):
    pass


def _fake_nvml(monkeypatch, **overrides):
    """A stand-in pynvml: one GPU known by UUID; index lookups fail so a lookup by ordinal is caught."""
    calls = {"util": 0}

    def by_index(i):
        raise AssertionError("looked up by CUDA ordinal, not by UUID")

    def util(handle):
        calls["util"] += 1
        raise _NVMLError("Not Supported")  # what a MIG slice answers

    fake = types.SimpleNamespace(
        **{
            **dict(
                NVMLError=_NVMLError,
                nvmlInit=lambda: None,
                nvmlShutdown=lambda: None,
                nvmlDeviceGetHandleByIndex=by_index,
                nvmlDeviceGetHandleByUUID=lambda u: "h" if u == "GPU-1234" else (_ for _ in ()).throw(_NVMLError(u)),
                nvmlDeviceGetUtilizationRates=util,
                nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=123 * MB),
                nvmlDeviceGetCount=lambda: 2,
                nvmlDeviceGetName=lambda h: b"Fake H100",
                nvmlSystemGetDriverVersion=lambda: "550.1",
            ),
            **overrides,
        }
    )
    monkeypatch.setattr(nvml, "pynvml", fake)
    monkeypatch.setattr(nvml, "_cuda_uuid", lambda index: "1234")
    return calls


def test_gpu_is_found_by_uuid_and_an_unsupported_counter_drops_only_its_field(monkeypatch):
    calls = _fake_nvml(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # cuda:0 here is NVML's device 1
    gpu = nvml.Gpu(0)
    assert [gpu.read() for _ in range(3)] == [(None, 123 * MB)] * 3
    assert calls["util"] == 1  # asked once, then dropped for the run


def test_sampler_keeps_sampling_when_nvml_fails(monkeypatch, tmp_path):
    _fake_nvml(monkeypatch, nvmlDeviceGetMemoryInfo=lambda h: (_ for _ in ()).throw(_NVMLError("gone")))
    with RunLog(tmp_path / "run") as log, Sampler(log, hz=20.0, gpu_index=0, flush_every_s=0.1):
        time.sleep(0.4)
    rows = [r for e in read_events(tmp_path / "run") if e["type"] == "samples" for r in e["rows"]]
    assert len(rows) >= 3 and all(r[2] > 0 and r[3] is None and r[4] is None for r in rows)


def test_unknown_uuid_under_cuda_visible_devices_turns_gpu_fields_off(monkeypatch):
    _fake_nvml(monkeypatch)
    monkeypatch.setattr(nvml, "_cuda_uuid", lambda index: "ffff")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-ffff")
    assert nvml.Gpu(0).read() == (None, None)  # not NVML's device 0: no figures rather than another GPU's


def test_gpu_facts_name_the_first_visible_gpu_without_cuda(monkeypatch):
    _fake_nvml(
        monkeypatch,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetName=lambda h: {"h0": b"A", "h1": b"B"}[h],
    )
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert nvml.gpu_facts() == {"gpu_name": "A", "gpu_count": 2, "driver": "550.1"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert nvml.gpu_facts() == {"gpu_name": "B", "gpu_count": 1, "driver": "550.1"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert nvml.gpu_facts() == {"gpu_name": None, "gpu_count": 0, "driver": "550.1"}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_real_nvml_samples_the_run_gpu(tmp_path):
    x = torch.ones(64 * MB, dtype=torch.uint8, device="cuda:0")  # makes the GPU's used memory non-zero
    with RunLog(tmp_path / "run") as log, Sampler(log, hz=20.0, gpu_index=0, flush_every_s=0.1):
        time.sleep(0.4)
    rows = [r for e in read_events(tmp_path / "run") if e["type"] == "samples" for r in e["rows"]]
    assert rows and all(r[4] is not None and r[4] >= x.numel() for r in rows)
    facts = nvml.gpu_facts()
    assert facts is not None and facts["gpu_name"] == torch.cuda.get_device_name(0)
