"""Does a pretrained encoder learn review sentiment where the from-scratch one cannot?
(docs/models.md, "Which model for real text").

The review files are written by this script in the UCSD 2018 format (one
``<Category>_5.json`` per category), so every run reads them through the same loader a
user's files go through. Their sentiment is learnable but not keyword-matched:

* each review carries its polarity in one adjective drawn from a pool of
  ``--adjectives`` positive and as many negative ones, so a word is seen only a few times
  in training, and most test reviews use a word the model met rarely or never;
* a share ``--negation`` of the reviews negate the *opposite* adjective ("not flimsy" is
  positive, "not sturdy" negative), so a word's polarity depends on its context;
* the rest of a review (product, opener, filler) is drawn independently of the rating.

A keyword learner trained from scratch on a few hundred such reviews has little to go on;
an encoder pretrained on English already places "superb" near "excellent". Each point is a
normal ``regionfed run`` (fedavg and majority, ``--seeds`` seeds) per model::

    .venv/bin/python experiments/review_encoders.py --out runs/review-encoders

Writes the review files, one run folder per model, ``summary.json`` and
``review_encoders.md`` (the table) under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

from regionfed.config import apply_set_overrides, build_config
from regionfed.experiment import run_experiment
from regionfed.io import write_atomic, write_json

POSITIVE = (
    "excellent superb wonderful fantastic marvelous terrific outstanding splendid delightful "
    "brilliant magnificent exceptional impressive lovely stellar phenomenal admirable "
    "flawless sublime exquisite charming enjoyable pleasing satisfying remarkable fabulous "
    "glorious sturdy reliable dependable durable elegant gorgeous beautiful perfect great "
    "good nice solid awesome amazing incredible tremendous commendable worthwhile valuable "
    "handy useful comfortable cozy smooth crisp vibrant refreshing fun engaging captivating "
    "gripping heartwarming uplifting stunning breathtaking exemplary ideal superior polished "
    "sensational classy dazzling pleasant").split()
NEGATIVE = (
    "terrible awful horrible dreadful atrocious abysmal appalling lousy poor bad shoddy "
    "flimsy defective broken useless worthless disappointing mediocre subpar inferior "
    "pathetic miserable unpleasant annoying frustrating irritating tedious boring dull bland "
    "cheap fragile unreliable faulty clunky awkward uncomfortable ugly hideous gross "
    "disgusting nasty rotten inadequate deficient lackluster forgettable overpriced wasteful "
    "sloppy careless confusing messy noisy wobbly dreary painful regrettable horrendous "
    "dismal deplorable substandard unusable unacceptable infuriating lame junky tacky "
    "dismaying grim").split()
PRODUCTS = {
    "Kitchen": "blender kettle toaster skillet knife mixer grater peeler".split(),
    "Books": "novel story book memoir thriller biography anthology guide".split(),
    "Toys": "puzzle doll robot kite yoyo blocks train board-game".split(),
    "Garden": "hose shovel rake planter sprinkler trowel wheelbarrow pruner".split(),
}
OPENERS = ("this {p} is", "the {p} was", "honestly the {p} is", "my new {p} is",
           "overall this {p} seems", "i think the {p} is", "the {p} turned out")
FILLERS = ("arrived on tuesday.", "bought it for my sister.", "the box was blue.",
           "shipping took a week.", "i used it twice.", "it came with a manual.",
           "got it on sale.", "second one i ordered.", "", "", "")
INTENSIFIERS = ("", "", "really", "quite", "rather", "truly", "very")


def review(rng: np.random.Generator, category: str, positive: bool, negation: float,
           pools: tuple[list[str], list[str]]) -> str:
    """One review text whose polarity is ``positive``: one adjective of that polarity, or
    (probability ``negation``) the negation of one of the opposite polarity."""
    pos, neg = pools
    negated = bool(rng.random() < negation)
    pool = (neg if positive else pos) if negated else (pos if positive else neg)
    adjective = str(rng.choice(pool))
    product = str(rng.choice(PRODUCTS[category]))
    opener = str(rng.choice(OPENERS)).format(p=product)
    intensifier = str(rng.choice(INTENSIFIERS))
    core = " ".join(w for w in (opener, "not" if negated else "", intensifier, adjective) if w)
    return f"{core}. {rng.choice(FILLERS)}".strip()


def write_reviews(folder: Path, per_category: int, adjectives: int, negation: float,
                  positive_share: float, seed: int) -> dict[str, Any]:
    """One UCSD-2018-format ``<Category>_5.json`` per category; returns what was written."""
    rng = np.random.default_rng(seed)
    pools = (list(POSITIVE[:adjectives]), list(NEGATIVE[:adjectives]))
    folder.mkdir(parents=True, exist_ok=True)
    for category in PRODUCTS:
        lines = []
        for i in range(per_category):
            positive = bool(rng.random() < positive_share)
            lines.append(json.dumps({
                "overall": 5.0 if positive else 1.0, "reviewerID": f"R{category[:2]}{i:05d}",
                "asin": f"B{i % 97:09d}",
                "reviewText": review(rng, category, positive, negation, pools)}))
        write_atomic(folder / f"{category}_5.json", "\n".join(lines) + "\n")
    return {"categories": list(PRODUCTS), "per_category": per_category,
            "adjectives_per_polarity": len(pools[0]), "negation": negation,
            "positive_share": positive_share}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--per-category", type=int, default=300, help="reviews per category file")
    p.add_argument("--adjectives", type=int, default=len(POSITIVE),
                   help=f"adjectives per polarity (at most {len(POSITIVE)})")
    p.add_argument("--negation", type=float, default=0.3)
    p.add_argument("--positive-share", type=float, default=0.6)
    p.add_argument("--models", default="tiny,minilm")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any other config override (as in `regionfed run --set`)")
    p.add_argument("--out", default="runs/review-encoders")
    return p.parse_args(argv)


#: per model, what it trains with (minilm: the pretrained encoder's usual fine-tuning lr)
MODEL_SETTINGS = {"tiny": {"training.optimizer.lr": 3e-3},
                  "minilm": {"training.optimizer.lr": 2e-4}}


def run_config(args: argparse.Namespace, model: str, data_dir: Path):
    config: dict[str, Any] = {
        "name": f"reviews-{model}", "dataset": "reviews",
        "data": {"path": str(data_dir), "clients_per_region": 3, "max_tokens": 32},
        "model": {"name": model},
        "training": {"rounds": args.rounds, "local_epochs": 1, "batch_size": 16,
                     "optimizer": {"name": "adamw"}, "eval_every": args.rounds},
        "methods": ["majority", "fedavg"], "seeds": args.seeds}
    settings = [f"{k}={v}" for k, v in MODEL_SETTINGS.get(model, {}).items()]
    apply_set_overrides(config, settings + list(args.set))
    return build_config(config)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not 1 <= args.adjectives <= len(POSITIVE):
        raise SystemExit(f"error: --adjectives must be in 1..{len(POSITIVE)}")
    out = Path(args.out)
    data_dir = out / "reviews"
    written = write_reviews(data_dir, args.per_category, args.adjectives, args.negation,
                            args.positive_share, seed=0)
    rows = []
    for model in args.models.split(","):
        config = run_config(args, model, data_dir)
        run_dir = out / config.name
        if run_dir.exists():
            shutil.rmtree(run_dir)
        results = run_experiment(config, run_dir, progress=False)
        row = {"model": model}
        for method in ("majority", "fedavg"):
            scores = [s["overall"] for s in results["methods"][method]["seeds"]]
            row[method] = {"mean": float(np.mean(scores)), "std": float(np.std(scores)),
                           "seeds": scores}
        rows.append(row)
        print(f"{model}: fedavg {100 * row['fedavg']['mean']:.1f} ± "
              f"{100 * row['fedavg']['std']:.1f}, majority {100 * row['majority']['mean']:.1f}",
              file=sys.stderr)
    write_json(out / "summary.json", {"args": vars(args), "data": written, "rows": rows})
    lines = ["| model | fedavg (test accuracy %, mean ± std over seeds) | majority | "
             "fedavg − majority |", "|---|---|---|---|"]
    for row in rows:
        f, m = row["fedavg"], row["majority"]
        lines.append(f"| {row['model']} | {100 * f['mean']:.1f} ± {100 * f['std']:.1f} | "
                     f"{100 * m['mean']:.1f} | {100 * (f['mean'] - m['mean']):+.1f} |")
    table = "\n".join(lines)
    write_atomic(out / "review_encoders.md", table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
