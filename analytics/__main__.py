"""`python -m analytics`: the same command as `delaymq analytics` (analytics.cli)."""

import sys

from analytics.cli import main

sys.exit(main())
