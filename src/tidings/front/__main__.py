"""``python -m tidings.front``: one front process, started by the broker (never by hand)."""

from .process import main

raise SystemExit(main())
