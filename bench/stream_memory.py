"""Peak memory of a streamed DuckDB result against DuckDB's thread count: why the SQL sandbox caps its threads.

    python3 bench/stream_memory.py [--threads default,1,2,4,8] [--rows 1000001]

Each reading is a fresh child process that runs one query the way `engine query --format csv` streams it (a
DataFrame chunk of 32 vectors at a time, written as CSV to /dev/null) and reports its peak RSS; the figure is the
peak over `SELECT 1` in the same settings. Run with and without MALLOC_ARENA_MAX=2 to tell DuckDB's own buffers
from the C allocator's per-thread arenas.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys


def child(threads: str, sql: str) -> None:
    import duckdb  # noqa: PLC0415

    conn = duckdb.connect(config={} if threads == "default" else {"threads": int(threads)})
    conn.execute(sql)
    with open(os.devnull, "w") as out:
        i = 0
        while not (df := conn.fetch_df_chunk(32)).empty:
            df.to_csv(out, index=False, header=i == 0)
            i += 1
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="default,1,2,4,8")
    ap.add_argument("--rows", type=int, default=1_000_001)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return 0
    big = f"SELECT range AS i, repeat('x', 200) AS s FROM range({args.rows})"
    print(f"# {os.cpu_count()} cores, MALLOC_ARENA_MAX={os.environ.get('MALLOC_ARENA_MAX', 'unset')}")
    for threads in args.threads.split(","):
        small, large = (
            int(
                subprocess.run(
                    [sys.executable, __file__, "--child", threads, q], capture_output=True, text=True, check=True
                ).stdout.split()[-1]
            )
            for q in ("SELECT 1", big)
        )
        print(f"threads={threads}: SELECT 1 {small} MB, streamed {large} MB, over it {large - small} MB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
