"""The answer as code (engine/advice/code.py): every loader's snippet is executed against a dataset and yields the
same number of batches and the same samples per epoch as the lab's own loader for that setting."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from threadpoolctl import threadpool_info

from engine.advice.code import SNIPPETS, snippet
from engine.config import RunConfig
from engine.loaders import LOADERS, open_loader
from tests._cli import cli_in_process

N, BATCH = 50, 8  # 7 batches, the last one short: drop_last must not differ


class IndexDataset:
    """dataset[i] (the user's way) or dataset[(epoch, i)] (the lab's) -> (x = [i, intra-op threads, BLAS threads],
    y = i): which samples came, and what the thread that made them was set to."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, key):
        i = key[1] if isinstance(key, tuple) else key
        blas = max((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"), default=0)
        return torch.tensor([float(i), float(torch.get_num_threads()), float(blas)]), i


def _setting(loader: str, **more) -> RunConfig:
    workers = 2 if LOADERS[loader].uses_workers else 0
    return RunConfig.from_dict(
        {"loader": loader, "workers": workers, "batch_size": BATCH, "device": "cpu", "threads": 1, **more}
    )


def _run_snippet(setting, epochs: int = 2) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    scope = {"dataset": IndexDataset()}
    before = torch.get_num_threads()
    try:
        exec(compile(snippet(setting), "<snippet>", "exec"), scope)  # noqa: S102 - the code a user pastes
        out = [list(scope["loader"]) for _ in range(epochs)]
    finally:
        torch.set_num_threads(before)
        del scope  # a DataLoader's persistent workers stop with it
    return out


def _lab_epochs(cfg: RunConfig, epochs: int = 2) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    with open_loader(IndexDataset(), cfg, "cpu") as loader:
        return [list(loader.epoch(e)) for e in range(epochs)]


def _ids(batches) -> list[int]:
    return [int(i) for _, y in batches for i in y]


@pytest.mark.parametrize("loader", sorted(SNIPPETS))
def test_each_snippet_yields_the_labs_batches_and_samples_per_epoch(loader):
    cfg = _setting(loader)
    mine, lab = _run_snippet(cfg), _lab_epochs(cfg)
    for got, want in zip(mine, lab, strict=True):
        assert len(got) == len(want) == -(-N // BATCH)
        assert [len(y) for _, y in got] == [len(y) for _, y in want]  # the short batch last in both
        assert sorted(_ids(got)) == sorted(_ids(want)) == list(range(N))
    # the difference the snippet's comment names: the order is the user's generator's, not the lab's plan
    assert "another order" in snippet(cfg)
    assert [_ids(e) for e in mine] != [_ids(e) for e in lab]


def test_the_snippet_sets_the_training_threads_the_run_set():
    before = torch.get_num_threads()
    scope = {"dataset": IndexDataset()}
    try:
        exec(compile(snippet(_setting("sync", threads=1)), "<snippet>", "exec"), scope)  # noqa: S102
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert "torch.set_num_threads" not in snippet(_setting("sync", threads=0))


def test_process_workers_run_one_intra_op_thread_and_the_capped_blas_pool():
    setting = {**_setting("processes").to_dict(), "transform_threads": 1, "start_method": "fork"}
    epoch = _run_snippet(setting, epochs=1)[0]
    x = torch.cat([b[0] for b in epoch])
    assert set(x[:, 1].tolist()) == {1.0}  # worker_init_fn: torch.set_num_threads(1) in every worker
    if any(p["user_api"] == "blas" for p in threadpool_info()):
        assert set(x[:, 2].tolist()) == {1.0}  # threadpoolctl's limit reached the workers' BLAS pool


def test_the_dataloader_call_carries_every_knob_the_run_set():
    text = snippet(_setting("processes", prefetch_depth=8, persistent_workers=False, start_method="spawn"))
    for part in (
        "num_workers=2",
        "prefetch_factor=8",
        "persistent_workers=False",
        'multiprocessing_context="spawn"',
        "pin_memory=False",
        "batch_size=8",
        "shuffle=True",
        "worker_init_fn=worker_init_fn",
    ):
        assert part in text
    assert "torch.cuda.is_available()" in snippet(_setting("processes", device="auto"))
    assert "pin_memory=True" in snippet({**_setting("processes").to_dict(), "device": "cuda"})


def test_a_loader_without_code_is_named():
    with pytest.raises(KeyError, match="loaders with code: sync"):
        snippet({"loader": "nope"})


def _cli(*args: str, db: Path) -> subprocess.CompletedProcess:
    """The CLI's main() in this process (tests/_cli.py): what `code` and `advise` print is the point here."""
    return cli_in_process(*args, db=db)


@pytest.mark.slow
def test_code_of_a_stored_run_builds_its_loader_and_runs(store):
    ran = _cli(
        "run",
        "--workload",
        "tensor",
        "--n-samples",
        "64",
        "--image-size",
        "8",
        "--width",
        "8",
        "--batch-size",
        "8",
        "--epochs",
        "2",
        "--device",
        "cpu",
        "--loader",
        "processes",
        "--workers",
        "2",
        "--threads",
        "1",
        "--prefetch-depth",
        "3",
        "--no-bound",
        "--quiet",
        db=store,
    )
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(_cli("query", "SELECT run_id FROM runs", "--format", "json", db=store).stdout)[0]["run_id"]
    out = _cli("code", run_id, db=store)
    assert out.returncode == 0, out.stderr
    assert f"LoaderLab run {run_id}: processes, 2 workers" in out.stdout and "prefetch_factor=3" in out.stdout
    scope = {"dataset": IndexDataset()}
    before = torch.get_num_threads()
    try:
        exec(compile(out.stdout, "<code>", "exec"), scope)  # noqa: S102 - what the user pastes
        assert sorted(_ids(list(scope["loader"]))) == list(range(N)) and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
        del scope
    advice = _cli("advise", "--workload", "tensor", "--model", "mlp", "--host", "any", "--max-memory", "64G", db=store)
    assert advice.returncode == 0, advice.stderr
    answer, code = advice.stdout.split("# --- the code", 1)  # the advice, then its code, last
    assert "under the 64.00 GiB cap" in answer and "num_workers=2" in code and "prefetch_factor=3" in code
    missing = _cli("code", "20200101-000000-abcdef", db=store)
    assert missing.returncode == 2 and "run_id" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1


def test_code_of_a_setting_not_run_yet_names_a_bad_field(tmp_path):
    out = _cli("code", "--setting", "loader=threads,workers=3,threads=2", db=tmp_path / "s.duckdb")
    assert out.returncode == 0, out.stderr
    assert "num_workers=3" in out.stdout and "torch.set_num_threads(2)" in out.stdout
    bad = _cli("code", "--setting", "loader=threads,workers=0", db=tmp_path / "s.duckdb")
    assert bad.returncode == 2 and bad.stderr.startswith("error: setting: workers")
