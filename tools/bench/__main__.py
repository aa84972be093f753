"""`python3 -m tools.bench` (what `scripts/bench` runs)."""

import sys

from tools.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
