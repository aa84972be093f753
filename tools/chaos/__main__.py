"""`python3 -m tools.chaos` (what `scripts/chaos` runs)."""

import sys

from tools.chaos.cli import main

if __name__ == "__main__":
    sys.exit(main())
