"""``python -m tb_gradlens``: the tb-gradlens command line."""

import sys

from tb_gradlens.cli import main

sys.exit(main())
