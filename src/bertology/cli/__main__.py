"""`python -m bertology.cli`: the `bertology` command (as the tests and the images start it)."""

import sys

from bertology.cli import main

if __name__ == "__main__":
    sys.exit(main())
