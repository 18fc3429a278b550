"""``grogu-research``: the research harness's commands.

  grogu-research eval winrate --limit 100          # GROGU Table 1 on SQuAD dev, embedded SmolLM2
  grogu-research rewrite-pairs --limit 20 --out pairs/
  grogu-research train-rewriter --pairs pairs/ --output rewriter/

Each sub-command lives in its own module with ``add_arguments(parser)`` and ``run(args) -> int``, imported
only when chosen.
"""

from __future__ import annotations

import argparse
import importlib

COMMANDS: dict[str, tuple[str, str]] = {
    "eval": (
        "grogu_research.experiments.cli",
        "run an experiment of the evaluation harness (winrate, noise, layout, seper, acu)",
    ),
    "rewrite-pairs": ("grogu_research.rewrite", "GROGU-ranked SFT/DPO data for a conversational query rewriter"),
    "train-rewriter": (
        "grogu_research.rewrite.train",
        "train a query rewriter on rewrite-pairs output: SFT then DPO (TRL)",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grogu-research", description="grogu's research harness.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        importlib.import_module(module).add_arguments(sub.add_parser(name, help=help_text))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return importlib.import_module(COMMANDS[args.command][0]).run(args)


if __name__ == "__main__":
    raise SystemExit(main())
