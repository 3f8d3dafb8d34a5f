"""``python -m qkbench``: the ``qkbench`` command."""

from qkbench.cli import run

run()
