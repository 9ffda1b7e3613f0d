// The bearer token: pasted, filled in by the development server, or obtained from the OpenID
// provider (authorization code + PKCE, by oidc-client-ts, loaded only when a provider is
// configured). It lives in session storage: never a cookie, gone with the tab.

const KEY = "mercury.token";

export interface OidcConfig {
  authority: string;
  clientId: string;
  scope: string;
}

export interface UiConfig {
  server: string;
  devToken: string | null;
  oidc: OidcConfig | null;
}

export function savedToken(): string | null {
  return sessionStorage.getItem(KEY);
}

export function saveToken(token: string): void {
  sessionStorage.setItem(KEY, token);
}

export function forgetToken(): void {
  sessionStorage.removeItem(KEY);
}

async function userManager(oidc: OidcConfig) {
  const { UserManager, WebStorageStateStore } = await import("oidc-client-ts");
  const redirect = new URL(window.location.pathname, window.location.origin).toString();
  return new UserManager({
    authority: oidc.authority,
    client_id: oidc.clientId,
    redirect_uri: redirect,
    response_type: "code",
    scope: oidc.scope,
    // The login's state and PKCE verifier too: the library would keep them in local storage.
    stateStore: new WebStorageStateStore({ store: window.sessionStorage }),
    userStore: new WebStorageStateStore({ store: window.sessionStorage }),
  });
}

export async function startOidcLogin(oidc: OidcConfig): Promise<void> {
  await (await userManager(oidc)).signinRedirect();
}

/** Completes a login the provider redirected back with; null when the URL isn't one. */
export async function finishOidcLogin(oidc: OidcConfig): Promise<string | null> {
  const params = new URLSearchParams(window.location.search);
  if (!params.has("state") || !(params.has("code") || params.has("error"))) return null;
  const user = await (await userManager(oidc)).signinRedirectCallback();
  window.history.replaceState(null, "", window.location.pathname);
  return user.access_token;
}
