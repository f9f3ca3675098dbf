"""The installed vLLM's command line as `vllm serve` parses it: the top-level parser with the
serve subcommand under it, as vllm/entrypoints/cli/main.py builds it. Parsing with the API
server's parser alone (make_arg_parser) differs where it matters: its config-file loader knows
the `--no-...` forms there, so `key: false` in a file looked honoured though `vllm serve` drops
it."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def parse_vllm_serve(plan: Any, config_dir: Path) -> Any:
    """The arguments `vllm serve` would run `plan` with, its files written to `config_dir`."""
    from vllm.entrypoints.cli import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    for name, text in plan.files.items():
        (config_dir / name).write_text(text)
    parser = FlexibleArgumentParser()
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    for cmd in serve.cmd_init():
        cmd.subparser_init(subparsers)
    argv = list(plan.argv)
    argv[argv.index("--config") + 1] = str(config_dir / argv[argv.index("--config") + 1])
    return parser.parse_args(argv[1:])  # what follows the executable
