"""``python -m aioge.benchmarks``: the same as ``aioge bench``."""

import sys

from aioge.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
