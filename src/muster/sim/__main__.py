"""``python -m muster.sim TRACE ...``, the same as ``muster sim TRACE ...``."""

import sys

from muster.sim.main import main

sys.exit(main())
