"""Allow ``python -m pgferry``."""

from pgferry.cli.main import entry

entry()
