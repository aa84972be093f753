"""`python3 -m zksched.devtools.bench` (what `scripts/bench` runs)."""

import sys

from zksched.devtools.bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
