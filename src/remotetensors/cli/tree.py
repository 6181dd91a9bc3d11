"""``remotetensors tree LOCATION``: the model's modules, repeated blocks folded (drawn by
:mod:`.tree_view`)."""

from __future__ import annotations

import argparse

from .options import add_location_options, opened

HELP = "Show modules as a tree, repeated blocks folded."
# One line for --help's list of examples.
EXAMPLE = "remotetensors tree hf://openai-community/gpt2"


def add_arguments(sub: argparse.ArgumentParser) -> None:
    add_location_options(sub)


def run(args: argparse.Namespace) -> int:
    from .tree_view import run_tree

    with opened(args) as model:
        return run_tree(model, as_json=args.json)
