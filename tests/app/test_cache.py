"""Cached reads are keyed on the store's data version: ingest and the dashboard's edits bump it, the job
queue's own writes (no result changes) do not, so a running job does not throw every chart away."""

from __future__ import annotations

import shutil

from engine import api
from engine.config import RunConfig
from engine.runlog import claim
from engine.store import ingest_pending, version
from ui import cache


def test_job_queue_writes_keep_the_version_and_ingest_bumps_it(seeded, seeded_template):
    db, ids = seeded
    before_data, before_file = cache.data_token(), cache.store_token()
    assert version.current(db), "the seeded store was ingested, so it has a version"
    cfg = RunConfig.from_dict({"workload": "tensor", "n_samples": 64, "epochs": 2})
    api.submit(cfg, origin="cli")  # a job-queue write
    assert cache.store_token() != before_file  # the file changed...
    assert cache.data_token() == before_data  # ...but no result did: cached charts stay

    counts = cache.cached(api.count_runs)
    src = next(p for p in (seeded_template[0].parent / "runs").iterdir() if (p / "events.jsonl").is_file())
    shutil.copytree(src, db.parent / "runs" / "copied-run")
    (db.parent / "runs" / "copied-run" / "ingested").unlink(missing_ok=True)
    claim(db.parent / "runs" / "copied-run", db)  # this store's RunLog now (the copy named the template's)
    assert ingest_pending(db=db)
    assert cache.data_token() != before_data
    assert cache.cached(api.count_runs) == api.count_runs() and counts == api.count_runs()  # same run id: upsert


def test_an_edit_or_an_import_from_anywhere_refreshes_every_session(seeded, tmp_path):
    """The CLI and a notebook edit and import without the dashboard's cache.clear(): the writes bump the data
    version themselves, so no session shows stale charts until the cache expires."""
    from engine.store import export_bundle, import_results, purge, set_tags, soft_delete  # noqa: PLC0415

    db, ids = seeded
    tags = lambda: cache.cached(api.search_runs, ids[0]).set_index("run_id").loc[ids[0], "tags"]  # noqa: E731
    assert "fast" not in str(tags())
    set_tags(ids[0], "fast", db=db)  # as `python -m engine` or a notebook would
    assert "fast" in str(tags())
    bundle = export_bundle(tmp_path / "bundle", db=db)
    total = sum(cache.cached(api.count_runs).values())
    soft_delete(ids[-1], db=db)
    purge(db=db)
    assert sum(cache.cached(api.count_runs).values()) == total - 1
    assert import_results(bundle, db=db).runs_added == 1
    assert sum(cache.cached(api.count_runs).values()) == total
