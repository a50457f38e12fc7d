"""``python -m wire._generate --jar PATH [--check]``."""

import sys

from .output import main

sys.exit(main())
