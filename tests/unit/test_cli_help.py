"""``remotetensors --help`` lists every command with a one-line example that the parser
accepts as typed."""

from __future__ import annotations

import shlex

from remotetensors.cli.app import COMMANDS, _parser


def test_help_lists_one_example_per_command_and_each_parses() -> None:
    parser = _parser()
    shown = parser.format_help()
    examples = shown.split("examples (one per command):\n", 1)[1].splitlines()
    names = [module.__name__.rsplit(".", 1)[-1] for module in COMMANDS]
    assert [shlex.split(line)[1] for line in examples] == names
    for line in examples:
        argv = shlex.split(line)
        assert argv[0] == "remotetensors"
        args = parser.parse_args(argv[1:])  # argparse exits (SystemExit) on a stale example
        assert args.command.__name__.endswith("." + argv[1])
