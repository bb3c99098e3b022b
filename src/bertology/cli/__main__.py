"""`python -m bertology.cli`: the `bertology` command (as the tests and the images start it)."""

from bertology.cli import entry

if __name__ == "__main__":
    entry()
