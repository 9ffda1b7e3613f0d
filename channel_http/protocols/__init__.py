"""The wire renderings of a turn's events, side by side.

``sse`` is Mercury's own Server-Sent Events dialect (the frames and the stream body that
forwards a turn's events); ``rejoin`` streams a turn from its log, from any event on, in the
same dialect. Each is a translation of one turn's events, never a second engine.
"""

from channel_http.protocols import rejoin, sse

__all__ = ["rejoin", "sse"]
