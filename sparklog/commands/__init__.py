"""Subcommands of the ``sparklog`` CLI, one module per command family.

Each module exposes ``add_parser(subparsers)``, which registers its subcommand(s) and sets
``func`` on the parsed namespace to a callable returning the process exit code.
"""
