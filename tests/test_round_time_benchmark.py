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
    # the paper's golden-section ρ search, timed through the settings it is given
    golden = bench.RunConfig(methods=["regionfed-grad"],
                             regionfed=bench.RegionFedConfig(line_search="golden"))
    _, _, run = bench.timed_run("regionfed-grad", tiny_federation, tiny_task,
                                         bench.training_config(2, "off", 4), golden)
    assert all(n == 14 for log in run.history for n in log["rho_evaluations"].values())


def test_baselines_report_both_arms_and_what_the_round_log_says(tiny_federation, tiny_task):
    bench = load_benchmark()
    rows = bench.baseline_times(tiny_federation, tiny_task, rounds=3, max_batched=4,
                                methods=("ditto", "scaffold"))
    assert set(rows) == {"ditto", "scaffold"}
    assert rows["ditto"]["client_batching"] == "batched"
    assert rows["scaffold"]["client_batching"].startswith("sequential (scaffold's")
    for row in rows.values():
        assert row["batched_seconds"] > 0 and row["sequential_seconds"] > 0
        assert row["speedup"] == row["sequential_seconds"] / row["batched_seconds"]
    table = bench.format_table({
        "seconds_per_round": {"fedavg-sequential": 2.0, "fedavg-batched": 1.0,
                              "fedavg-processes": 1.1, "fedavg": 1.1,
                              **dict.fromkeys(bench.REGIONFED_METHODS, 1.5)},
        "speedup_batched": 2.0, "speedup_processes": 1.8, "ratio_mode": "processes",
        "floor_efficiency_processes": 0.45,
        **{bench.ratio_key(m): 1.5 for m in bench.REGIONFED_METHODS},
        "projected_ratios_at_paper_E40": {bench.ratio_key(m): 1.01
                                          for m in bench.REGIONFED_METHODS},
        "floor_seconds": 0.5, "floor_efficiency": 0.5, "sequential_floor_efficiency": 0.25,
        "scale": {"clients": 8, "round_seconds": 1.0}, "clients_per_second_8000": 8,
        "peak_rss_gb_8000": 1.0, "breakdown_seconds": {}, "baselines": rows,
        "ratio_grad_golden_fedavg": 1.7, "line_search_speedup": 1.6})
    assert "ditto: batched / sequential (batched)" in table
    rows = {line.split(" | ")[0].rstrip(): line.split(" | ")[1]
            for line in table.splitlines() if " | " in line}
    assert rows["regionfed-grad, golden-section ρ / fedavg (processes)"] == "1.70×"
    assert rows["ρ search seconds, golden section / Brent"] == "1.60×"
