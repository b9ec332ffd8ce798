"""The ``regionfed`` command: parses arguments, calls the Python API, prints the summary.

Bad input (invalid config, unknown method, malformed data) ends with one ``error: ...`` line
on stderr and exit status 2; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from regionfed import __version__
from regionfed.algorithms.registry import METHODS
from regionfed.config import (
    MODEL_CONFIGS,
    RunConfig,
    apply_set_overrides,
    build_config,
    load_config,
    set_dotted,
)
from regionfed.errors import ConfigError, RegionFedError

EXIT_BAD_INPUT = 2

# flag dest → dotted config key (stable names, docs/cli.md; extend, don't rename)
FLAG_KEYS = {
    "dataset": "dataset",
    "rounds": "training.rounds",
    "local_epochs": "training.local_epochs",
    "batch_size": "training.batch_size",
    "lr": "training.optimizer.lr",
    "optimizer": "training.optimizer.name",
    "sample_rate": "training.sample_rate",
    "eval_every": "training.eval_every",
    "seeds": "seeds",
    "regions": "data.num_regions",
    "clients_per_region": "data.clients_per_region",
    "concept_shift": "data.concept_shift",
    "alpha_d": "data.alpha_d",
    "num_queries": "data.num_queries",
    "data_seed": "data.seed",
    "name": "name",
    "runtime": "runtime",
    "dp_mode": "dp.mode",
    "dp_sigma": "dp.sigma",
    "dp_clip": "dp.clip",
    "dp_delta": "dp.delta",
    "target_epsilon": "training.target_epsilon",
    "init_from": "model.init_from",
    "device": "training.device",
    "superlink": "flower.superlink",
}

EXAMPLES = """examples:
  regionfed run                                   # default comparison on esci-synth
  regionfed run --methods fedavg,local --rounds 5 --seeds 3
  regionfed run --config configs/default.yaml --concept-shift 0.8 --alpha-d 0.1
  regionfed run --set data.regional_bias=0.5 --set training.optimizer.lr=0.001
  regionfed run --methods fedavg,regionfed-grad --dp-sigma 4 --dp-clip 1 --sample-rate 0.5
      # noise from OS entropy; privacy.json lists every accounted release and 'unaccounted'
  regionfed run --methods regionfed-grad --dp-sigma 4 --set dp.noise_seed=1   # test noise:
      # reproducible, and labelled "deterministic noise — not private" wherever ε appears
  regionfed run --methods fedavg-ft,regionfed-plus --dp-sigma 1 --dp-clip 1
      # both fine-tune on each client before evaluation (fedavg-ft from the global model,
      # regionfed-plus from the regional one): their gap is what the regions add
  regionfed run --methods regionfed-grad --set regionfed.line_search=golden
      # ρ by the paper's golden-section search (Alg. 3); default: Brent's method, same
      # loss and tolerance in ~8 validation passes instead of 14
  regionfed run --resume runs/default             # finish an interrupted run
  regionfed run --jobs 1                          # one process (default: one per free core)
  regionfed run --methods fedavg --set training.client_batching=processes
      # one run's clients over worker processes, one thread each (auto: with >= 2 cores)
  regionfed run --dataset femnist --model cnn --methods fedavg,regionfed-grad --rounds 5 \\
      --local-epochs 2 --set data.num_regions=4   # real LEAF FEMNIST (../shared/data)
  regionfed run --model t5-tiny --methods fedavg,regionfed-grad --rounds 2 \\
      --num-queries 1200                          # T5 text-to-text, parsed generations
  regionfed run --model minilm --methods fedavg --rounds 2 --set training.optimizer.lr=5e-5
  regionfed run --runtime flower --superlink 127.0.0.1:9093 --methods regionfed-grad \\
      --regions 2 --clients-per-region 2   # SuperNodes: see 'regionfed flower --help'
"""

FLOWER_EXAMPLES = """examples (one machine, loopback; each line in its own terminal):
  regionfed flower superlink --port 9093
  regionfed flower node --superlink 127.0.0.1:9093 --region region_00 --client-index 0 --port 9100
  regionfed flower node --superlink 127.0.0.1:9093 --region region_00 --client-index 1 --port 9101
  regionfed flower node --superlink 127.0.0.1:9093 --region region_01 --client-index 0 --port 9102
  regionfed flower node --superlink 127.0.0.1:9093 --region region_01 --client-index 1 --port 9103
  regionfed run --runtime flower --superlink 127.0.0.1:9093 --methods fedavg,regionfed-grad \\
      --regions 2 --clients-per-region 2 --rounds 2
each node is a warm worker (one process for every message of a run); --worker fresh runs
Flower's new flwr-clientapp process per message instead
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (error contract, docs/cli.md)
        self.exit(EXIT_BAD_INPUT, f"error: {message} (see '{self.prog} --help')\n")


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _add_run_arguments(p: argparse.ArgumentParser, default_methods: str | None) -> None:
    p.add_argument("--config", metavar="FILE", help="YAML run configuration")
    p.add_argument("--dataset", choices=["esci-synth", "femnist", "esci", "reviews"],
                   help="benchmark (default esci-synth; femnist reads real LEAF data, esci "
                   "real Amazon ESCI queries with weak labels (regions = locales), reviews "
                   "Amazon reviews: UCSD *_5.json(.gz) files or JSON lines (regions = "
                   "categories); all read data.path)")
    p.add_argument("--data-dir", metavar="DIR",
                   help="folder holding the real dataset's files (femnist: a LEAF folder or "
                   "one .npz; esci: shopping_queries_dataset_examples.parquet or one "
                   "*examples*.csv, plus products if present; reviews: every .json, .jsonl, "
                   ".json.gz, .jsonl.gz file, a region per category)")
    p.add_argument("--model", choices=list(MODEL_CONFIGS),
                   help="model (default tiny; t5-tiny/t5-small: T5 text-to-text; minilm: "
                   "pretrained all-MiniLM-L6-v2, needs the hf extra; cnn for femnist)")
    p.add_argument("--init-from", metavar="PATH",
                   help="t5 models: start from a saved T5 folder (config.json + weights, "
                   "and its tokenizer if present) instead of a random init")
    p.add_argument("--methods", type=_csv, default=_csv(default_methods) if default_methods
                   else None, metavar="M1,M2|all",
                   help=f"methods to compare: {', '.join(METHODS)}, or all")
    p.add_argument("--rounds", type=int, metavar="T", help="communication rounds")
    p.add_argument("--local-epochs", type=int, metavar="E", help="local epochs per round")
    p.add_argument("--batch-size", type=int, metavar="B", help="local batch size")
    p.add_argument("--optimizer", choices=["sgd", "adamw"], help="local optimizer")
    p.add_argument("--lr", type=float, help="local learning rate")
    p.add_argument("--sample-rate", type=float, metavar="q", help="Poisson client sampling rate")
    p.add_argument("--eval-every", type=int, metavar="K", help="validate every K rounds")
    p.add_argument("--seeds", type=int, metavar="S", help="number of seeds (0..S-1)")
    p.add_argument("--regions", type=int, metavar="M", help="number of regions")
    p.add_argument("--clients-per-region", type=int, metavar="K", help="clients per region")
    p.add_argument("--concept-shift", type=float, metavar="X", help="esci-synth concept shift")
    p.add_argument("--alpha-d", type=float, metavar="A", help="Dirichlet client skew α_D")
    p.add_argument("--num-queries", type=int, metavar="N", help="esci-synth queries in total")
    p.add_argument("--data-seed", type=int, metavar="S", help="seed of the generated data")
    p.add_argument("--dp-mode", choices=["user", "region", "off"],
                   help="differential privacy: user-level (default when σ is set), paper's "
                   "region-level, or off (default)")
    p.add_argument("--dp-sigma", type=float, metavar="S", help="noise multiplier σ")
    p.add_argument("--dp-clip", type=float, metavar="C", help="clipping norm C")
    p.add_argument("--dp-delta", type=float, metavar="D", help="δ of (ε, δ)-DP")
    p.add_argument("--target-epsilon", type=float, metavar="EPS",
                   help="stop before ε (PLD) would exceed EPS")
    p.add_argument("--runtime", choices=["inprocess", "flower-sim", "flower"],
                   help="runtime of the federated methods: inprocess (default), flower-sim "
                   "(Flower's simulation runtime, one SuperNode per client) or flower "
                   "(Flower's Deployment Engine at --superlink); flower extra")
    p.add_argument("--superlink", metavar="HOST:PORT",
                   help="the SuperLink of --runtime flower (regionfed flower superlink)")
    p.add_argument("--device", metavar="DEV",
                   help="where models compute: cpu (default), cuda, cuda:N, or auto")
    p.add_argument("--name", help="run name (output folder runs/<name>)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config key, e.g. data.regional_bias=0.5 (repeatable)")
    p.add_argument("--out", metavar="DIR", help="output folder (default runs/<name>; an "
                   "existing folder gets a -2, -3… suffix instead of being overwritten)")
    p.add_argument("--resume", metavar="DIR", help="continue an interrupted run in DIR")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--report", action="store_true",
                   help="finish by writing report.md and its plots (as regionfed report)")


def _add_jobs_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=int, metavar="N",
                   help="methods × seeds trained at once, each in its own process with "
                   "cores/N torch threads (default: one per free core, at most one per "
                   "run; 1 under OMP_NUM_THREADS, on a GPU or a Flower runtime; 1 = all in "
                   "this process); runs are handed out in an order that balances the "
                   "workers by each method's cost estimate. Results equal one "
                   "process's up to float summation order")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="regionfed", description=__doc__.split("\n")[0],
                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLES)
    parser.add_argument("--version", action="version", version=f"regionfed {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser(
        "run", help="run one experiment (methods × seeds) and print the results table",
        description="Run the configured methods on one federation; write runs/<name>/ "
        "(config.yaml, metrics.jsonl, results.json, checkpoints) and print the table.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLES)
    _add_run_arguments(run, None)
    _add_jobs_argument(run)
    compare = sub.add_parser(
        "compare", help="compare methods (default: all) in the Table-1 layout",
        description="Run every method (or --methods) like 'run', optionally with fair "
        "tuning (--tune) and both with and without DP (--privacy both), and write the "
        "Table-1 layout as markdown (results.md in the output folder, and --markdown FILE).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  regionfed compare --rounds 10 --seeds 3\n"
        "  regionfed compare --methods all --seeds 3 --tune --privacy both --dp-sigma 1 "
        "--dp-clip 1 --markdown docs/comparison.md\n")
    _add_run_arguments(compare, "all")
    _add_jobs_argument(compare)
    audit = sub.add_parser(
        "audit", help="measure the privacy a run delivers, with canary clients",
        description="Train the methods once (in-process, or --runtime flower-sim) with M "
        "canary clients (each inserted with probability 1/2; every time one is sampled it "
        "sends a fixed random direction through the real client code, clipping, release "
        "and ledger), then score every canary by the cosine between its direction and what "
        "the model moved. Per method and per regional model: the ledger's ε, the one-shot ε "
        "estimate (Andrew et al., ICLR 2024; reported at the lower end of its interval at "
        "--confidence, with the point estimate and upper end) and the one-run lower bound at "
        "--confidence (Steinke et al., NeurIPS 2023). Exits 1 when an estimate or lower "
        "bound exceeds the accounted ε: the code leaks more than the ledger says. "
        "--dp-sigma 0 (clipping only) is the calibration case.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  regionfed audit --methods fedavg,regionfed-grad --dp-sigma 4 "
        "--dp-clip 1 --regions 2 --clients-per-region 5 --rounds 10 --sample-rate 0.5 "
        "--out runs/audit\n"
        "  regionfed audit --methods fedavg --dp-sigma 0 --dp-clip 1 --json   "
        "# no noise: detected\n")
    _add_run_arguments(audit, "fedavg,regionfed-grad")
    audit.add_argument("--canaries", type=int, default=None, metavar="M",
                       help="canary clients (each inserted with probability 1/2; default "
                       "1000)")
    audit.add_argument("--canary-region", metavar="R",
                       help="put every canary in region R (default: all regions, in turn)")
    audit.add_argument("--confidence", type=float, default=None, metavar="P",
                       help="confidence of the estimate's lower end and of the lower bound "
                       "(default 0.95)")
    audit.add_argument("--json", action="store_true", help="print the audit record as JSON")
    compare.add_argument("--tune", action="store_true",
                         help="fair tuning: each method picks its learning rate and key "
                         "hyper-parameter on validation data (grids: tuning.* config keys)")
    compare.add_argument("--privacy", choices=["configured", "both"], default="configured",
                         help="'both': run once without DP and once with the configured DP "
                         "(--dp-sigma …), one table each")
    compare.add_argument("--markdown", metavar="FILE",
                         help="also write the comparison markdown to FILE")
    privacy = sub.add_parser(
        "privacy", help="ε of the Poisson-subsampled Gaussian mechanism (dp-accounting)",
        description="ε after T rounds of the user-level regional Gaussian mechanism "
        "(noise multiplier σ, Poisson client sampling rate q), by dp-accounting's PLD (tight) "
        "and RDP accountants; with --target-epsilon also the σ that reaches it (PLD).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  regionfed privacy --sigma 4 --sample-rate 0.1 --rounds 50 "
        "--delta 1e-5\n  regionfed privacy --sigma 4 --sample-rate 0.1 --rounds 50 "
        "--delta 1e-5 --target-epsilon 1 --json\n")
    privacy.add_argument("--sigma", type=float, required=True, help="noise multiplier σ")
    privacy.add_argument("--sample-rate", type=float, required=True, metavar="q",
                         help="Poisson client sampling rate")
    privacy.add_argument("--rounds", type=int, required=True, metavar="T", help="rounds")
    privacy.add_argument("--delta", type=float, required=True, help="δ")
    privacy.add_argument("--target-epsilon", type=float, metavar="EPS",
                         help="also compute the σ needed to reach this ε")
    privacy.add_argument("--json", action="store_true", help="print JSON")
    report = sub.add_parser(
        "report", help="markdown report with PNG plots from finished runs",
        description="Write report.md and its plots into each run folder — convergence, "
        "per-region bars, RegionFed α_r/ρ_r/strategy per region over rounds — and print "
        "the markdown. With several runs, also a combined report (--out) with their tables "
        "and, when their σ differ, the privacy–utility plot.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  regionfed report runs/default\n"
        "  regionfed report runs/cmp/no-dp runs/cmp/dp --out runs/cmp/report\n"
        "  regionfed report --results-doc docs/results.md results/*   # published studies\n")
    report.add_argument("runs", nargs="+", metavar="DIR", help="run folders")
    report.add_argument("--out", metavar="DIR",
                        help="folder of the combined report of several runs "
                        "(default runs/report)")
    report.add_argument("--results-doc", metavar="FILE",
                        help="the DIRs are study folders (regionfed sweep): write the "
                        "results document (ours next to the paper's numbers) to FILE, "
                        "e.g. docs/results.md")
    predict = sub.add_parser(
        "predict", help="intent, corrected query and NER tags from a finished run",
        description="Answer queries with a region's final model and with the global model "
        "of a finished run (paper Table 3): intent, corrected query, one BIO tag per word.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  regionfed predict --run runs/default --region price_conscious "
        "\"cheap runing shoes\" \"nike air max size 10\"\n"
        "  regionfed predict --run runs/default --region urban_tech --method fedavg --json "
        "\"iphone case\"\n")
    predict.add_argument("--run", required=True, metavar="DIR", help="a finished run folder")
    predict.add_argument("queries", nargs="+", metavar="QUERY", help="queries to answer")
    predict.add_argument("--region", required=True, help="whose model answers")
    predict.add_argument("--method", help="trained method (default: the best one with "
                         "regional models, else the best trained one)")
    predict.add_argument("--seed", type=int, default=0, help="which seed's model (default 0)")
    predict.add_argument("--json", action="store_true", help="print JSON")
    _add_sweep_command(sub)
    _add_flower_commands(sub)
    return parser


def _add_sweep_command(sub: Any) -> None:
    from regionfed.studies.registry import STUDIES

    listing = "\n".join(f"  {s.name:<14} {s.paper}: {s.question}" for s in STUDIES.values())
    sweep = sub.add_parser(
        "sweep", help="run one of the paper's studies (variants × methods × seeds)",
        description="Run every variant of a study at the reduced size (default, about an "
        "hour on 2 cores, variants in parallel) or the paper's (--full); resumable; writes "
        "<out>/<variant>/ runs, <study>.csv, <study>.png and study.json.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"studies:\n{listing}\n\nexamples:\n  regionfed sweep heterogeneity\n"
        "  regionfed sweep privacy --seeds 2 --out runs/sweeps/privacy\n"
        "  regionfed sweep regions --jobs 2          # 2 variants at a time, 1 thread each\n"
        "  regionfed sweep ablation --full\n")
    sweep.add_argument("study", choices=list(STUDIES), metavar="STUDY",
                       help="one of: " + ", ".join(STUDIES))
    sweep.add_argument("--full", action="store_true", help="the paper's size (hours)")
    sweep.add_argument("--seeds", type=int, metavar="S", help="seeds per run")
    sweep.add_argument("--out", metavar="DIR",
                       help="output folder (default runs/sweeps/<study>; rerunning resumes)")
    sweep.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config key of every run (repeatable)")
    sweep.add_argument("--jobs", type=int, metavar="N",
                       help="variants trained at once, each in its own process with "
                       "cores/N torch threads (default: one per usable core, at most one "
                       "per variant; 1 = all in this process)")
    sweep.add_argument("--quiet", action="store_true", help="no progress bars")


def _add_flower_commands(sub: Any) -> None:
    flower = sub.add_parser(
        "flower", help="start a Flower SuperLink or a SuperNode for --runtime flower",
        description="Start the processes of Flower's Deployment Engine (flower extra): a "
        "SuperLink, and one SuperNode per client, each holding one client of a region. "
        "Then submit runs with 'regionfed run --runtime flower --superlink HOST:PORT'. "
        "Connections are insecure (plain text): loopback or trusted networks only.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=FLOWER_EXAMPLES)
    roles = flower.add_subparsers(dest="role", required=True, parser_class=_Parser)
    link = roles.add_parser("superlink", help="start flower-superlink (all APIs on one port)")
    link.add_argument("--host", default="127.0.0.1", help="address to listen on")
    link.add_argument("--port", type=int, default=9093, help="port (default 9093)")
    node = roles.add_parser(
        "node", help="start flower-supernode holding one client of a region",
        description="Start a SuperNode that holds client --client-index of --region. The "
        "node rebuilds the run's federation from the submitted configuration; --data "
        "points it at this machine's copy of the dataset file (real-data datasets).")
    node.add_argument("--superlink", required=True, metavar="HOST:PORT",
                      help="the SuperLink's address")
    node.add_argument("--region", required=True, help="region of this node's client")
    node.add_argument("--client-index", type=int, default=0, metavar="K",
                      help="which client of the region (0-based, default 0)")
    node.add_argument("--data", metavar="FILE", help="this machine's dataset file")
    node.add_argument("--host", default="127.0.0.1", help="address of the node's own API")
    node.add_argument("--port", type=int, default=9094,
                      help="port of the node's own API (one per node on a machine)")
    node.add_argument("--worker", choices=["warm", "fresh"], default="warm",
                      help="warm (default): this process runs every message of a run, the "
                      "client built once; fresh: Flower's default, a new flwr-clientapp "
                      "process per message")
    for p in (link, node):
        p.add_argument("--print-command", action="store_true",
                       help="print the Flower command line instead of starting it (a warm "
                       "node runs that SuperNode in-process, beside its worker)")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    data: dict[str, Any] = load_config(args.config) if args.config else {}
    for dest, key in FLAG_KEYS.items():
        value = getattr(args, dest, None)
        if value is not None:
            set_dotted(data, key, value)
    if getattr(args, "data_dir", None) is not None:
        from regionfed.data.data_dir import data_dir_overrides

        for key, value in data_dir_overrides(data.get("dataset", "esci-synth"),
                                             args.data_dir).items():
            set_dotted(data, key, value)
    if args.methods is not None:
        data["methods"] = args.methods
    if args.model is not None:
        set_dotted(data, "model.name", args.model)
    if args.dp_sigma is not None and args.dp_mode is None and "mode" not in data.get("dp", {}):
        set_dotted(data, "dp.mode", "user")  # asking for noise means user-level DP
    apply_set_overrides(data, args.set)
    return build_config(data)


def cmd_audit(args: argparse.Namespace) -> int:
    import json

    from regionfed.audit import (
        AuditSettings,
        audit_findings,
        audit_summary,
        audit_table,
        run_audit,
    )

    if args.resume:
        raise ConfigError("an audit is one fresh training run: --resume does not apply")
    config = config_from_args(args)
    given = {"canaries": args.canaries, "region": args.canary_region,
             "confidence": args.confidence}  # unset flags keep AuditSettings' defaults
    record = run_audit(config, AuditSettings(**{k: v for k, v in given.items()
                                                if v is not None}))
    if args.out:
        from regionfed.audit import write_audit

        write_audit(Path(args.out), record)
    if args.json:
        print(json.dumps(audit_summary(record), indent=2))
    else:
        print(audit_table(record))
    findings = audit_findings(record)
    if findings:
        print("audit: leak found: " + "; ".join(findings), file=sys.stderr)
        return 1
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from regionfed.experiment import run_experiment, unique_run_dir
    from regionfed.report import data_line, results_table, reused_notes

    if args.resume:
        out = Path(args.resume)
        config = build_config(load_config(out / "config.yaml"))
    else:
        config = config_from_args(args)
        out = unique_run_dir(Path(args.out) if args.out else Path("runs") / config.name)
    results = run_experiment(config, out, progress=not args.quiet, resume=bool(args.resume),
                             jobs=args.jobs)
    print(results_table(results))
    if line := data_line(results):
        print(line)
    for note in reused_notes(results):
        print(note)
    print(f"\nresults: {out / 'results.json'}")
    if args.report:
        from regionfed.report import write_report

        write_report(out)
        print(f"report: {out / 'report.md'}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    import shlex

    from regionfed.experiment import unique_run_dir, with_overrides
    from regionfed.io import write_atomic
    from regionfed.studies.compare import resume_compare, run_compare

    command = "regionfed " + shlex.join(args.argv)
    progress = not args.quiet
    if args.resume:
        out = Path(args.resume)
        done = resume_compare(out, command=command, progress=progress, jobs=args.jobs)
    else:
        config = config_from_args(args)
        if args.tune:
            config = with_overrides(config, {"tuning.enabled": True})
        out = unique_run_dir(Path(args.out) if args.out else Path("runs") / config.name)
        done = run_compare(config, out, both=args.privacy == "both", command=command,
                           progress=progress, jobs=args.jobs)
    if args.markdown:
        write_atomic(Path(args.markdown), done.markdown)
    print(done.markdown)
    print(f"results: {out / 'results.md'}")
    if args.report:
        from regionfed.report import write_combined_report

        write_combined_report(done.folders, out / "report")
        print(f"report: {out / 'report' / 'report.md'}")
    return 0


def cmd_privacy(args: argparse.Namespace) -> int:
    import json

    from regionfed.privacy.ledger import epsilon_pld, epsilon_rdp, sigma_for_epsilon

    report: dict[str, Any] = {
        "epsilon_pld": epsilon_pld(args.sigma, args.sample_rate, args.rounds, args.delta),
        "epsilon_rdp": epsilon_rdp(args.sigma, args.sample_rate, args.rounds, args.delta),
        "delta": args.delta, "sigma": args.sigma, "sample_rate": args.sample_rate,
        "rounds": args.rounds}
    if args.target_epsilon is not None:
        report["sigma_for_target"] = sigma_for_epsilon(args.target_epsilon, args.sample_rate,
                                                       args.rounds, args.delta)
    if args.json:
        print(json.dumps({k: (None if isinstance(v, float) and v == float("inf") else v)
                          for k, v in report.items()}))
        return 0
    print(f"σ = {args.sigma}, q = {args.sample_rate}, T = {args.rounds}, δ = {args.delta}")
    print(f"ε (PLD, tight) = {report['epsilon_pld']:.4f}")
    print(f"ε (RDP)        = {report['epsilon_rdp']:.4f}")
    if "sigma_for_target" in report:
        print(f"σ for ε = {args.target_epsilon} (PLD): {report['sigma_for_target']:.4f}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    import json

    from regionfed.predict import format_predictions, predict_queries

    result = predict_queries(args.run, args.region, args.queries, args.method, args.seed)
    print(json.dumps(result.to_dict(), indent=2) if args.json else format_predictions(result))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from regionfed.report import write_combined_report, write_report

    if args.results_doc:
        from regionfed.io import write_atomic
        from regionfed.studies.results_doc import results_markdown

        markdown = results_markdown([Path(f) for f in args.runs])
        write_atomic(Path(args.results_doc), markdown)
        print(f"results document: {args.results_doc}")
        return 0
    if len(args.runs) == 1:
        print(write_report(Path(args.runs[0])))
        return 0
    out = Path(args.out) if args.out else Path("runs") / "report"
    print(write_combined_report([Path(f) for f in args.runs], out))
    print(f"report: {out / 'report.md'}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    import shlex

    from regionfed.studies.registry import get_study
    from regionfed.studies.runner import default_jobs, run_study

    study = get_study(args.study)
    out = Path(args.out) if args.out else Path("runs") / "sweeps" / study.name
    record = run_study(study, out, full=args.full, seeds=args.seeds, set_items=args.set,
                       progress=not args.quiet,
                       command="regionfed " + shlex.join(args.argv),
                       jobs=default_jobs(study) if args.jobs is None else args.jobs)
    width = max(len(v) for v in record["variants"])
    print(f"{study.title} ({study.paper}), test Overall %, mean ± std over seeds")
    for row in record["rows"]:
        std = f" ± {100 * row['overall_std']:.1f}" if row["overall_std"] is not None else ""
        eps = "" if row["epsilon"] is None else f"  ε={row['epsilon']:.2f}" + (
            f" ({row['epsilon_note']})" if row.get("epsilon_note") else "")
        print(f"  {row['variant']:<{width}}  {row['method']:<18} "
              f"{100 * row['overall']:.1f}{std}{eps}")
    print(f"\nresults: {out / (study.name + '.csv')} ({record['wall_seconds']:.0f} s)")
    return 0


def cmd_flower(args: argparse.Namespace) -> int:
    import shlex

    from regionfed.runtime.flower.processes import (
        exec_flower,
        superlink_command,
        supernode_command,
    )

    if args.role == "superlink":
        command, prefix = superlink_command(args.host, args.port), "rf-superlink-"
    else:
        command = supernode_command(args.superlink, args.region, args.client_index,
                                    args.data, args.host, args.port, args.worker)
        prefix = f"rf-node-{args.client_index}-"
    if args.print_command:
        print(shlex.join(command))
        return 0
    if args.role == "node" and args.worker == "warm":
        from regionfed.runtime.flower.warm import run_warm_node, runtime_address

        run_warm_node(command, runtime_address(args.host, args.port), prefix)
    exec_flower(command, prefix)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # recorded in reports
    try:
        return {"run": cmd_run, "compare": cmd_compare, "privacy": cmd_privacy,
                "audit": cmd_audit,
                "report": cmd_report, "flower": cmd_flower,
                "predict": cmd_predict, "sweep": cmd_sweep}[args.command](args)
    except RegionFedError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
