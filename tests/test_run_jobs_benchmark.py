import json

from helpers import load_script


def test_the_benchmark_times_both_arms_on_one_workload(tmp_path, capsys):
    bench = load_script("benchmarks/run_jobs.py")
    out = tmp_path / "bench.json"
    assert bench.main(["--rounds", "1", "--jobs", "2", "--json", str(out),
                       "--set", "methods=[majority, fedavg, local]",
                       "--set", "data.num_queries=480", "--set", "data.num_regions=2",
                       "--set", "data.clients_per_region=2", "--set", "model.dim=32",
                       "--set", "model.heads=2"]) == 0
    record = json.loads(out.read_text())
    assert set(record["seconds"]) == {"--jobs 1", "--jobs 2"}
    assert all(s > 0 for s in record["seconds"].values()) and record["speedup_jobs"] > 0
    assert record["methods"] == ["majority", "fedavg", "local"]
    assert record["max_overall_difference"] < 0.02  # the same runs, other processes
    assert "speedup of --jobs 2" in capsys.readouterr().out
