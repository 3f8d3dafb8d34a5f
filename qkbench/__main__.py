"""``python -m qkbench``: the ``qkbench`` command."""

from qkbench.cli import app

app()
