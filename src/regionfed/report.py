"""The one-screen results table (Table-1 layout): one row per method."""

from __future__ import annotations

from typing import Any

COLUMNS = (("Overall", "overall"), ("Intent", "intent"), ("Spell", "spell"),
           ("NER-F1", "ner_f1"), ("RRS", "rrs"), ("Worst region", "worst_region"))


def _cell(summary: dict[str, Any], key: str) -> str:
    value = 100 * summary[key]
    std = summary.get(f"{key}_std")
    return f"{value:.1f} ± {100 * std:.1f}" if std is not None else f"{value:.1f}"


def epsilon_cell(summary: dict[str, Any]) -> str:
    eps = summary.get("epsilon")
    return "∞ (no DP)" if eps is None else f"{eps:.2f}"


def results_table(results: dict[str, Any]) -> str:
    """A markdown table of ``results.json``'s methods (values in %)."""
    header = ["Method", *(c for c, _ in COLUMNS), "ε"]
    rows = [[name, *(_cell(s, k) for _, k in COLUMNS), epsilon_cell(s)]
            for name, s in results["methods"].items()]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), sep, *(line(r) for r in rows)])
