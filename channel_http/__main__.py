"""``python -m channel_http`` is ``mercury-http``."""

from channel_http.cli.command import main

raise SystemExit(main())
