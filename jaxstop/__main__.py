"""``python -m jaxstop COMMAND``: jaxstop's command line.

Commands:
    simulate: simulation studies of a policy against a table of learning curves
        (:func:`jaxstop.sim.cli`; ``python -m jaxstop simulate --help``).
    compare: policies compared at an equal budget on the same keys, with paired
        intervals (:func:`jaxstop.sim.compare`; ``python -m jaxstop compare --help``).
"""

from __future__ import annotations

import sys
from typing import Sequence

_USAGE = """usage: python -m jaxstop COMMAND [options]

commands:
  simulate   run simulated studies of a policy against a table of learning curves
             (python -m jaxstop simulate --help)
  compare    compare policies at an equal budget on one table, with paired intervals
             (python -m jaxstop compare --help)"""


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatches ``argv`` (default ``sys.argv[1:]``) to the command it names; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "simulate":
        from jaxstop.sim import cli

        return cli(rest, prog="python -m jaxstop simulate")
    if command == "compare":
        from jaxstop.sim import compare_cli

        return compare_cli(rest, prog="python -m jaxstop compare")
    print(f"{_USAGE}\n\npython -m jaxstop: error: unknown command {command!r} (choose from: simulate, compare)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
