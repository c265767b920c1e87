"""``python -m magicselector``: the ``magicselector`` command (``magicselector.cli``)."""

import sys

from magicselector.cli import main

sys.exit(main())
