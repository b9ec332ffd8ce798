from helpers import load_script


def load_benchmark():
    return load_script("benchmarks/round_time.py")


def test_round_timer_reports_the_timed_rounds_and_a_breakdown(tiny_federation, tiny_task):
    bench = load_benchmark()
    assert bench.ratio_key("regionfed-grad") == "ratio_grad_fedavg"
    seconds, parts = bench.round_times("regionfed-grad", tiny_federation, tiny_task,
                                       bench.training_config(4, "auto", 4))
    assert len(seconds) == 2 and all(s > 0 for s in seconds)  # rounds 2 and 3 only
    # the ρ search and the regional scoring show up beside training
    assert {"train", "evaluate", "evaluate-score", "server"} <= set(parts)
    _, fedavg = bench.round_times("fedavg", tiny_federation, tiny_task,
                                  bench.training_config(3, "off", 4))
    assert set(fedavg) == {"train", "server"}
