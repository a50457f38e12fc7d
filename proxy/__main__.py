"""``python -m proxy`` is the same as the ``purgatory-proxy`` console script."""

import sys

from proxy.cli import main

sys.exit(main())
