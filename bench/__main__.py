"""`python -m bench`: see bench/cli.py."""

import sys

from bench.cli import main

sys.exit(main())
