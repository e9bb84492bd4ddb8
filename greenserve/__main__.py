"""``python -m greenserve``: the same as the ``greenserve`` command."""

import sys

from greenserve.entry.cli import main

sys.exit(main())
