"""Run at start-up by every Python process the tests start (``tests/conftest.py`` puts this
folder on their ``PYTHONPATH``): see ``interpreter_once``."""

import interpreter_once

interpreter_once.install()
