"""What SPDL's per-item orchestration costs on this machine, with no lab code in the way: a bare
`spdl.pipeline` (source -> pipe(fn, concurrency=c, output_order="input") -> aggregate(32) -> sink(2)) over
1000 items whose work is a busy-wait of --work-us microseconds (0: none), at concurrency 1 and 2, two trials each.

    .venv/bin/python bench/spdl_overhead.py [--work-us 0,1000] [--items 1000]

Wall and CPU-seconds of the whole process per pass. With no work, the time is SPDL's own: an asyncio task and two
thread hand-offs per item. bench/loaders.py --versus measures the lab's `spdl` loader (the same pipeline shape
around a dataset) beside DataLoader and torchdata.nodes; this says how much of its time is SPDL itself.
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor

from spdl.pipeline import PipelineBuilder


def _busy(us: float):
    def work(i: int) -> int:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < us / 1e6:
            pass
        return i

    return work


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work-us", default="0,1000", help="busy-wait per item, microseconds, joined by commas")
    ap.add_argument("--items", type=int, default=1000)
    args = ap.parse_args()
    print(f"{os.cpu_count()} CPUs; {args.items} items, batches of 32, sink 2; two trials each")
    print("work us  concurrency  wall s  CPU-s  per item (wall)")
    for us in (float(x) for x in args.work_us.split(",")):
        for concurrency in (1, 2):
            for _ in range(2):
                pool = ThreadPoolExecutor(concurrency)
                pipeline = (
                    PipelineBuilder()
                    .add_source(range(args.items))
                    .pipe(_busy(us), concurrency=concurrency, executor=pool, output_order="input")
                    .aggregate(32)
                    .add_sink(2)
                    .build(num_threads=1)
                )
                t0, c0 = time.perf_counter(), time.process_time()
                with pipeline.auto_stop():
                    n = sum(len(batch) for batch in pipeline.get_iterator(timeout=60))
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                pool.shutdown()
                assert n == args.items, n
                print(f"{us:7.0f}  {concurrency:11d}  {wall:6.3f}  {cpu:5.3f}  {wall / n * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
