import sys

from magicselector.cli import main

sys.exit(main())
