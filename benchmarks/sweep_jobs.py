"""Sweep throughput: one process (torch's default threads, then one thread) against
``--jobs N`` worker processes (``regionfed sweep``), all measured in ONE run on the same
study (this machine is shared and noisy: compare ratios, not absolute times).

    .venv/bin/python benchmarks/sweep_jobs.py                  # ~4 minutes on 2 cores
    .venv/bin/python benchmarks/sweep_jobs.py --rounds 2       # quicker
    .venv/bin/python benchmarks/sweep_jobs.py --json out.json  # also write the numbers

Workload: the ``assignment`` study's 4 variants (semantic, geographic, random, adversarial:
about equal cost, so 2 workers can split them evenly) with fedavg and regionfed-grad, 1 seed,
``--rounds`` rounds, otherwise the reduced size (8 regions × 5 clients, 8,000 queries,
``tiny`` model). A study whose variants differ in cost gains less: workers take whole
variants. Each configuration runs in a fresh output folder
through the CLI, so the timing includes worker start-up. Prints the wall seconds and
``speedup_jobs`` = (one process, default threads) / (``--jobs N``) and
``speedup_jobs_vs_one_thread`` = (one process, one thread) / (``--jobs N``), and checks that
every configuration produced the same Overall (to 1e-3: thread counts change last bits).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from regionfed.runtime.threads import usable_cores


def timed_sweep(out: Path, args: list[str], env: dict[str, str]) -> tuple[float, list[float]]:
    """Wall seconds of one ``regionfed sweep`` and the Overall of each row."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "regionfed", "sweep", "assignment", *args,
                    "--out", str(out)], check=True, env=env, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    rows = json.loads((out / "study.json").read_text())["rows"]
    return seconds, [row["overall"] for row in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=None,
                        help="workers of the parallel run (default: usable cores, ≤ 4)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    jobs = args.jobs or max(2, min(len(usable_cores()), 4))
    common = ["--quiet", "--seeds", "1", "--set", f"training.rounds={args.rounds}",
              "--set", f"training.eval_every={args.rounds}",
              "--set", "methods=[fedavg, regionfed-grad]"]
    base_env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    runs = {
        "one process, default threads": (["--jobs", "1"], base_env),
        "one process, 1 thread": (["--jobs", "1"], {**base_env, "OMP_NUM_THREADS": "1"}),
        f"--jobs {jobs}": (["--jobs", str(jobs)], base_env),
    }
    seconds: dict[str, float] = {}
    overall: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, (flags, env)) in enumerate(runs.items()):
            seconds[label], overall[label] = timed_sweep(Path(tmp) / str(i), common + flags,
                                                         env)
            print(f"{label:<30} {seconds[label]:7.1f} s", flush=True)
    reference = overall["one process, default threads"]
    agree = all(abs(a - b) <= 1e-3 for values in overall.values()
                for a, b in zip(values, reference, strict=True))
    result = {
        "usable_cores": len(usable_cores()), "jobs": jobs, "rounds": args.rounds,
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
        "speedup_jobs": round(seconds["one process, default threads"]
                              / seconds[f"--jobs {jobs}"], 2),
        "speedup_jobs_vs_one_thread": round(seconds["one process, 1 thread"]
                                            / seconds[f"--jobs {jobs}"], 2),
        "same_overall": agree}
    print(f"speedup of --jobs {jobs}: {result['speedup_jobs']}× over one process with "
          f"torch's default threads, {result['speedup_jobs_vs_one_thread']}× over one "
          f"process with one thread; same Overall in all three: {agree}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
