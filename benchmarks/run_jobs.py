"""``regionfed run --jobs``: one process against worker processes, on the main job's
workload, measured in ONE run (this machine is shared and noisy: compare the ratio, not the
seconds).

    .venv/bin/python benchmarks/run_jobs.py                 # make run's 10 methods, 4 rounds
    .venv/bin/python benchmarks/run_jobs.py --rounds 20     # all of make run's rounds
    .venv/bin/python benchmarks/run_jobs.py --json out.json # also write the numbers

Both arms run ``regionfed run --config configs/default.yaml`` through the CLI in a fresh
folder (start-up, federation and report-free), the first with ``--jobs 1`` (one process,
the threads it picks), the second with ``--jobs N`` (default: one per free core). Prints
the wall seconds, ``speedup_jobs`` = one process / N workers and the largest difference in
any method's test Overall between the arms (threads change float summation order only).
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

ROOT = Path(__file__).resolve().parents[1]


def timed_run(out: Path, flags: list[str]) -> tuple[float, dict[str, float]]:
    """Wall seconds of one ``regionfed run`` and each method's test Overall."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "regionfed", "run", *flags, "--out", str(out),
                    "--quiet"], check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   env={k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"})
    seconds = time.perf_counter() - start
    methods = json.loads((out / "results.json").read_text())["methods"]
    return seconds, {m: r["overall"] for m, r in methods.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=None,
                        help="workers of the parallel arm (default: one per free core)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="extra config overrides for both arms (e.g. a smaller workload)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    common = ["--config", args.config, "--rounds", str(args.rounds),
              "--eval-every", str(args.rounds), *(f"--set={s}" for s in args.set)]
    arms = {"--jobs 1": ["--jobs", "1"],
            f"--jobs {args.jobs or 'auto'}": [] if args.jobs is None
            else ["--jobs", str(args.jobs)]}
    seconds: dict[str, float] = {}
    overall: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, flags) in enumerate(arms.items()):
            seconds[label], overall[label] = timed_run(Path(tmp) / str(i), common + flags)
            print(f"{label:<14} {seconds[label]:7.1f} s", flush=True)
    one, many = list(arms)
    difference = max(abs(overall[one][m] - overall[many][m]) for m in overall[one])
    result = {"cores": len(os.sched_getaffinity(0)), "rounds": args.rounds,
              "methods": list(overall[one]),
              "seconds": {k: round(v, 1) for k, v in seconds.items()},
              "speedup_jobs": round(seconds[one] / seconds[many], 2),
              "max_overall_difference": round(difference, 5)}
    print(f"speedup of {many}: {result['speedup_jobs']}× over one process; largest "
          f"Overall difference between the arms {100 * difference:.2f} points")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
