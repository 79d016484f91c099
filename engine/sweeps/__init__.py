"""Many runs: a local sweep run one after another (local), the same on a Ray cluster (ray/), and the first
visit's demo sweep queued as jobs (demo).

    from engine.sweeps.local import run_sweep

Nothing is imported here, so that a sweep's launcher loads neither Ray nor the job queue unless it needs them.
"""
