"""``mercury-http``: the command line.

``command`` parses it and runs ``serve`` (settings, auth, the channel check, then uvicorn);
``chat`` and ``chat_view`` are the terminal client and how it shows a turn; ``admin`` the
space and pairing commands; ``config`` ``check-config`` and ``init``. The clients talk to a
running server over HTTP and never load the server's modules.
"""

from channel_http.cli.command import main

__all__ = ["main"]
