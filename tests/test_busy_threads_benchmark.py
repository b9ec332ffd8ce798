from helpers import load_script


def test_the_benchmark_times_both_arms_and_reports_the_picked_threads(capsys):
    bench = load_script("benchmarks/busy_threads.py")
    assert bench.main(["--load", "0", "--repeats", "1", "--methods", "majority",
                       "--json"]) == 0
    import json

    record = json.loads(capsys.readouterr().out)
    assert len(record["seconds"]["default"]) == len(record["seconds"]["picked"]) == 1
    assert record["picked"].startswith("threads: ") and record["ratio_default_over_picked"] > 0
