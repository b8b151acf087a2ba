"""`python -m contentnode` runs the same command line as the console script."""

import sys

from contentnode.cli import main

sys.exit(main())
