"""The spdl loader's snippet (engine/advice/_code_spdl.py) is real code: executed against a dataset it yields the
same number of batches, the same batch sizes and the same set of samples per epoch as the lab's spdl loader, runs its
stages on one intra-op thread each, and raises a failing sample's error instead of dropping the sample."""

from __future__ import annotations

import gc

import pytest
import torch
from spdl.pipeline import PipelineFailure

from engine.advice._code_spdl import spdl_lines, spdl_snippet
from engine.config import RunConfig
from engine.loaders import open_loader

N, BATCH = 50, 8  # 7 batches, the last one short


class IndexDataset:
    """dataset[i] (the user's way) or dataset[(epoch, i)] (the lab's) -> (x = [i, intra-op threads], y = i)."""

    def __init__(self, fail_at: int | None = None):
        self.fail_at = fail_at

    def __len__(self) -> int:
        return N

    def __getitem__(self, key):
        i = key[1] if isinstance(key, tuple) else int(key)
        if i == self.fail_at:
            raise ValueError(f"index dataset refuses sample {i}")
        return torch.tensor([float(i), float(torch.get_num_threads())]), i


def _setting(**more) -> dict:
    return RunConfig.from_dict(
        {"loader": "spdl", "workers": 2, "batch_size": BATCH, "device": "cpu", "prefetch_depth": 3, **more}
    ).to_dict()


def _run_snippet(setting: dict, dataset: IndexDataset, epochs: int = 2) -> list[list]:
    scope = {"dataset": dataset}
    before = torch.get_num_threads()
    try:
        exec(compile(spdl_snippet(setting), "<snippet>", "exec"), scope)  # noqa: S102 - the code a user pastes
        return [list(scope["loader"]) for _ in range(epochs)]
    finally:
        torch.set_num_threads(before)
        del scope
        gc.collect()  # the pipeline stops when it is collected


def _ids(batches) -> list[int]:
    return [int(i) for _, y in batches for i in y]


def test_the_snippet_yields_the_labs_batches_and_samples_per_epoch():
    setting = _setting()
    mine = _run_snippet(setting, IndexDataset())
    with open_loader(IndexDataset(), RunConfig.from_dict(setting), "cpu") as lab_loader:
        lab = [list(lab_loader.epoch(e)) for e in range(2)]
    for got, want in zip(mine, lab, strict=True):
        assert len(got) == len(want) == -(-N // BATCH)
        assert [len(y) for _, y in got] == [len(y) for _, y in want]  # the short batch last in both
        assert sorted(_ids(got)) == sorted(_ids(want)) == list(range(N))
    assert _ids(mine[0]) != _ids(mine[1])  # RandomSampler shuffles each epoch anew
    assert "another order" in spdl_snippet(setting)  # the difference, said where the user reads it
    x = torch.cat([b[0] for b in mine[0]])
    assert set(x[:, 1].tolist()) == {1.0}  # the pool's initializer: one intra-op thread per stage thread


def test_a_failing_sample_raises_its_error_instead_of_shrinking_the_epoch():
    with pytest.raises(PipelineFailure) as err:  # what the snippet's comment says the user gets
        _run_snippet(_setting(), IndexDataset(fail_at=3), epochs=1)
    causes = [e.__cause__ for e in err.value.exceptions]
    assert any(isinstance(c, ValueError) and str(c) == "index dataset refuses sample 3" for c in causes), causes


def test_the_snippet_carries_the_settings_knobs():
    text = "\n".join(spdl_lines(_setting(workers=4, batch_size=16, prefetch_depth=8)))
    for part in (
        "ThreadPoolExecutor(4,",
        "concurrency=4",
        ".aggregate(16)",
        ".add_sink(8)",
        "max_failures=0",
        'output_order="input"',
    ):
        assert part in text
    assert "pin_memory" not in text  # a CPU run pins nothing
    assert "x.pin_memory(), y.pin_memory()" in "\n".join(spdl_lines(_setting(device="cuda", pin_memory=True)))
    assert "torch.cuda.is_available()" in "\n".join(spdl_lines(_setting(device="auto", pin_memory=True)))
    assert "from mypkg.batch import stack as collate_fn" in "\n".join(spdl_lines(_setting(collate="mypkg.batch:stack")))
