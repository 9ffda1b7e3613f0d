"""Several auth providers tried in order, and building them from the environment.

Exceptions::

    AuthError
    └── AuthConfigurationError   raised by a provider that can't load; ``load_providers``
                                 logs it and skips that provider
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from auth_providers.oidc import OidcProvider
from auth_providers.provider import AuthConfigurationError, AuthProvider
from auth_providers.static import StaticTokenProvider
from core.people.principal import Principal

__all__ = ["KNOWN_PROVIDERS", "AuthChain", "load_providers"]

KNOWN_PROVIDERS: Final = ("oidc", "static")
"""The provider names ``load_providers`` can build."""


class AuthChain:
    """Asks each provider in turn; the first that recognizes the caller wins."""

    name: str = "chain"

    def __init__(
        self, providers: Sequence[AuthProvider], *, log: logging.Logger | None = None
    ) -> None:
        self.providers: tuple[AuthProvider, ...] = tuple(providers)
        self._log = log or logging.getLogger(__name__)

    async def authenticate(self, headers: Mapping[str, str]) -> Principal | None:
        """The principal of the first provider that recognizes ``headers``, or ``None``."""
        for provider in self.providers:
            try:
                principal = await provider.authenticate(headers)
            except Exception as error:
                # Only the type: a provider's message might quote what it was given.
                self._log.error(
                    'auth provider "%s" failed while authenticating (%s); treating the '
                    "caller as unrecognized by it.",
                    provider.name,
                    type(error).__name__,
                )
                continue
            if principal is not None:
                return principal
        return None


def load_providers(
    names: Sequence[str],
    *,
    static_tokens: str | None,
    oidc_issuer: str | None,
    oidc_audience: str | None,
    oidc_algorithms: str | Sequence[str] | None = None,
    oidc_leeway_s: float | str | None = None,
    oidc_allow_http: bool = False,
    log: logging.Logger | None = None,
) -> tuple[AuthChain | None, list[str]]:
    """Build the named providers, in order, skipping (and logging) those that fail to load.

    Returns the chain, or ``None`` when no provider loaded, and the reasons of the failures.
    """
    logger = log or logging.getLogger(__name__)
    builders: dict[str, Callable[[], AuthProvider]] = {
        "static": lambda: StaticTokenProvider.from_env(static_tokens),
        "oidc": lambda: OidcProvider.from_env(
            oidc_issuer,
            oidc_audience,
            oidc_algorithms,
            oidc_leeway_s,
            allow_http=oidc_allow_http,
            log=logger,
        ),
    }
    loaded: list[AuthProvider] = []
    failures: list[str] = []
    for name in names:
        builder = builders.get(name)
        try:
            if builder is None:
                raise AuthConfigurationError(
                    f'there is no auth provider called "{name}"; '
                    f"choose among {', '.join(KNOWN_PROVIDERS)}."
                )
            loaded.append(builder())
        except AuthConfigurationError as error:
            reason = f'auth provider "{name}" failed to load: {error}'
            logger.error("%s", reason)
            failures.append(reason)
    return (AuthChain(loaded, log=logger) if loaded else None), failures
