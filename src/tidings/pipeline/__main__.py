"""``python -m tidings.pipeline archive|expire ...`` (see :mod:`tidings.pipeline.cli`)."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
