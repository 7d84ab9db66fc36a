"""``python -m turbo_core.cli``."""

import sys

from turbo_core.cli.main import main

sys.exit(main())
