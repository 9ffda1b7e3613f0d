"""Where a bridge may send its credentials, or fetch a platform's file: the one rule.

A platform names the URL of a file (Slack's ``url_private``, the ``url`` of WhatsApp's media
answer, a Discord attachment or the redirect its CDN answers). Taken as given, that URL would
carry the bot's token, or the server's request, to any host it names. :func:`on_platform`
admits only the configured API's own scheme and host (a stand-in or a proxy in its place)
and, over HTTPS, the platform's own domains and their subdomains.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

__all__ = ["on_platform"]


def on_platform(url: str, *, api_url: str, domains: Sequence[str]) -> bool:
    """Whether ``url`` is on the API at ``api_url`` (same scheme, host and port) or an
    ``https`` URL on one of ``domains`` (``slack.com`` admits ``files.slack.com``)."""
    try:
        target, api = urlsplit(url), urlsplit(api_url)
        host = target.hostname or ""
        same_api = (target.scheme, target.netloc) == (api.scheme, api.netloc)
        _ = target.port  # a port that isn't a number is no platform's URL
    except ValueError:
        return False
    if not target.scheme or not host:
        return False  # a relative URL, or one without a host, is no platform's
    if same_api:
        return True
    return target.scheme == "https" and any(
        host == domain or host.endswith("." + domain) for domain in domains
    )
