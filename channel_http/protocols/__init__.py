"""The wire renderings of a turn's events, side by side.

``sse`` is Mercury's own Server-Sent Events dialect (the frames and the stream body that
forwards a turn's events, whichever protocol renders them); ``rejoin`` streams a turn from its
log, from any event on, in the same dialect; ``ag_ui`` renders the events as AG-UI 1.0 runs.
Each is a translation of one turn's events, never a second engine.
"""

from channel_http.protocols import ag_ui, rejoin, sse

__all__ = ["ag_ui", "rejoin", "sse"]
