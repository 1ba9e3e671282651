"""Allow ``python -m pgferry``."""

from pgferry.cli.main import main

raise SystemExit(main())
