"""``python -m aioge`` runs the command line."""

import sys

from aioge.cli import main

sys.exit(main())
