"""Threads on a busy machine: a run beside other work, with torch's default thread count
(one per usable core) against the count :mod:`regionfed.runtime.threads` picks.

The script makes the other work itself — ``--load`` processes spinning in pure Python — so
both arms see the same contention, then times one ``regionfed run`` per arm, alternating,
``--repeats`` times, and prints the median ratio (> 1: the picked count is faster)::

    .venv/bin/python benchmarks/busy_threads.py            # one spinning process per core
    .venv/bin/python benchmarks/busy_threads.py --load 0   # an idle machine: ratio ≈ 1
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from regionfed.runtime.threads import usable_cores

ROOT = Path(__file__).resolve().parents[1]


def spin(stop: mp.Event) -> None:
    while not stop.is_set():
        sum(range(10_000))


def timed_run(out: Path, threads: str | None, rounds: int, methods: str) -> tuple[float, str]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = threads
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "regionfed", "run", "--methods", methods, "--rounds",
         str(rounds), "--out", str(out)], env=env, cwd=ROOT, capture_output=True, text=True,
        check=True)
    picked = next((ln for ln in done.stderr.splitlines() if ln.startswith("threads:")), "")
    return time.perf_counter() - start, picked


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--load", type=int, default=None,
                   help="spinning processes (default: one per usable core)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--methods", default="local")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    cores = len(usable_cores())
    load = cores if args.load is None else args.load
    stop = mp.Event()
    spinners = [mp.Process(target=spin, args=(stop,), daemon=True) for _ in range(load)]
    for s in spinners:
        s.start()
    times: dict[str, list[float]] = {"default": [], "picked": []}
    picked = ""
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for k in range(args.repeats):
                t, _ = timed_run(Path(tmp) / f"d{k}", str(cores), args.rounds, args.methods)
                times["default"].append(t)
                t, picked = timed_run(Path(tmp) / f"p{k}", None, args.rounds, args.methods)
                times["picked"].append(t)
    finally:
        stop.set()
        for s in spinners:
            s.join()
    ratio = statistics.median(times["default"]) / statistics.median(times["picked"])
    record = {"cores": cores, "load_processes": load, "methods": args.methods,
              "rounds": args.rounds, "seconds": times, "picked": picked,
              "ratio_default_over_picked": ratio}
    if args.json:
        print(json.dumps(record))
    else:
        print(f"{cores} cores, {load} spinning processes; {picked}")
        print(f"  default threads ({cores}): median {statistics.median(times['default']):.1f} s")
        print(f"  picked: median {statistics.median(times['picked']):.1f} s")
        print(f"  default / picked = {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
