"""`python3 -m zksched.devtools.chaos` (what `scripts/chaos` runs)."""

import sys

from zksched.devtools.chaos.cli import main

if __name__ == "__main__":
    sys.exit(main())
