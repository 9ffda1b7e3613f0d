"""Mercury's HTTP surface: one conversational turn per request, streamed as Server-Sent Events."""

from channel_http.app import CHANNEL_API_VERSION, HttpChannel, build_app, with_cors

__all__ = ["CHANNEL_API_VERSION", "HttpChannel", "build_app", "with_cors"]
