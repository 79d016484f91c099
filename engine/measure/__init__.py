"""Measurement: what a run records besides its epochs, each piece in its own module.

    timers.py       per step: data wait, copy to device, compute, total; per epoch: wall time, time to first batch
    cuda_events.py  CUDA events, pooled, read at epoch end (no per-step synchronize)
    sampler.py      CPU %, memory (PSS of the run's process tree) and GPU, sampled in a thread (nvml.py)
    host.py         the host fingerprint a run is compared by
    pools.py        thread pools the lab does not set (BLAS, OpenMP in user code), found and limited by threadpoolctl
    capacity.py     the CPUs and memory this process may use (affinity, cgroup)
    bound.py        the lower bound and efficiency (its passes: _passes.py; split's: modes/_stage_step.py)
    probe.py        what a batch, a step and the GIL cost, apart from any loader setting (predict's input)
    forecast.py     a run's predicted epoch: before it runs from a cached probe (prior), else after from its own
    verdicts.py     what limits a run, in words, and what would help (no torch: the pages read it)
    waits.py        data-wait percentiles
    trace.py        --trace: one extra epoch under torch.profiler
"""

__all__: list[str] = []
