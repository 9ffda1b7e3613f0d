"""Auth providers: who a request's bearer token belongs to.

``AuthProvider`` is the port; ``StaticTokenProvider`` and ``OidcProvider`` implement
it, and ``AuthChain`` tries several in order. Nothing here knows about HTTP routes.
"""

from __future__ import annotations

from auth_providers.chain import KNOWN_PROVIDERS, AuthChain, load_providers
from auth_providers.oidc import (
    DEFAULT_ALGORITHMS,
    SUPPORTED_ALGORITHMS,
    OidcProvider,
    OidcSettings,
)
from auth_providers.provider import (
    AUTH_API_VERSION,
    AuthConfigurationError,
    AuthError,
    AuthProvider,
    bearer_token,
)
from auth_providers.static import StaticTokenProvider, StaticUser

__all__ = [
    "AUTH_API_VERSION",
    "DEFAULT_ALGORITHMS",
    "KNOWN_PROVIDERS",
    "SUPPORTED_ALGORITHMS",
    "AuthChain",
    "AuthConfigurationError",
    "AuthError",
    "AuthProvider",
    "OidcProvider",
    "OidcSettings",
    "StaticTokenProvider",
    "StaticUser",
    "bearer_token",
    "load_providers",
]
