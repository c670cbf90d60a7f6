"""`--config.a.b=v` overrides for sub-commands that take a config file (train, demo, eval).

argparse rejects unknown options, so the free-form override items are split off before it parses; they land in
`args.config_overrides` for `reasoner.config.load_config`. Not a command itself (it has no `register`).
"""

from __future__ import annotations

import argparse
import sys


def accept_config_overrides(parser: argparse.ArgumentParser) -> None:
    """Makes `parser` accept `--config.KEY=VALUE` items, stored as `args.config_overrides`."""
    original = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):
        from reasoner.config import split_overrides

        try:
            overrides, rest = split_overrides(list(sys.argv[1:] if args is None else args))
        except ValueError as err:
            parser.error(str(err))
        namespace, extras = original(rest, namespace)
        namespace.config_overrides = overrides
        return namespace, extras

    parser.parse_known_args = parse_known_args
