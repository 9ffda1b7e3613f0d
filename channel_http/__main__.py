"""``python -m channel_http`` is ``mercury-http``."""

from channel_http.cli import main

raise SystemExit(main())
