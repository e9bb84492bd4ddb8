"""``python -m greenserve``: the same as the ``greenserve`` command."""

import sys

from greenserve.cli import main

sys.exit(main())
