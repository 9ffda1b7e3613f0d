// The app shell: sign in, the conversation list, the current conversation and the side panel.

import { Api, ApiError, type ConversationSummary, type Me } from "./api";
import {
  finishOidcLogin,
  forgetToken,
  savedToken,
  saveToken,
  startOidcLogin,
  type UiConfig,
} from "./auth";
import { Conversation } from "./conversation";
import { button, h } from "./dom";
import { useLanguage } from "./language";
import { plainText } from "./markdown";
import type { Settled } from "./message";
import { Panels } from "./panels";
import { strings as S } from "./strings";

const root = document.getElementById("app") as HTMLElement;
const announcer = h("div", {
  class: "visually-hidden",
  attrs: { role: "status", "aria-live": "polite" },
});

function announce(text: string): void {
  announcer.textContent = text;
}

async function loadConfig(): Promise<UiConfig> {
  const fallback: UiConfig = { server: window.location.origin, devToken: null, oidc: null };
  try {
    const response = await fetch(new URL("config.json", window.location.href));
    if (!response.ok) return fallback;
    const config = (await response.json()) as Partial<UiConfig>;
    return {
      server: (config.server || window.location.origin).replace(/\/$/, ""),
      devToken: config.devToken ?? null,
      oidc: config.oidc ?? null,
    };
  } catch {
    return fallback;
  }
}

/** What one browser tab tells the others of the same UI when a confirmation ended in it. */
interface Ended {
  conversationId: string;
  confirmationId: string;
  outcome: Settled;
  said: string;
}

function newConversationId(): string {
  return crypto.randomUUID();
}

class App {
  private readonly api: Api;
  private conversation: Conversation | null = null;
  private readonly list = h("ul", { class: "conversations" });
  private readonly main = h("main", { attrs: { id: "main" } });
  private panels: Panels | null = null;
  private me: Me | null = null;
  /** The other tabs of this UI (absent where the browser has no BroadcastChannel). */
  private readonly tabs =
    typeof BroadcastChannel === "undefined" ? null : new BroadcastChannel("mercury-confirmations");

  constructor(private readonly config: UiConfig) {
    this.api = new Api(config.server, () => savedToken());
  }

  async start(): Promise<void> {
    this.watchConfirmations();
    useLanguage(null); // the browser's, until the server says which is the person's
    if (this.config.oidc) {
      try {
        const token = await finishOidcLogin(this.config.oidc);
        if (token) saveToken(token);
      } catch (error) {
        this.signIn(S.loginFailed(error instanceof Error ? error.message : String(error)));
        return;
      }
    }
    if (!savedToken()) {
      this.signIn(null);
      return;
    }
    await this.enter();
  }

  signIn(message: string | null): void {
    this.conversation?.dispose();
    this.conversation = null;
    const token = h("input", {
      attrs: {
        id: "token",
        type: "password",
        autocomplete: "off",
        required: "",
        "aria-describedby": "token-help",
      },
    });
    if (this.config.devToken) token.value = this.config.devToken;
    const form = h(
      "form",
      {
        class: "signin",
        on: {
          submit: (event) => {
            event.preventDefault();
            if (!token.value.trim()) return;
            saveToken(token.value.trim());
            void this.enter();
          },
        },
      },
      h("h1", {}, S.appName),
      message ? h("p", { class: "error", attrs: { role: "alert" } }, message) : null,
      h("label", { attrs: { for: "token" } }, S.accessToken),
      token,
      h(
        "p",
        { class: "muted", attrs: { id: "token-help" } },
        this.config.devToken ? S.devTokenHelp : S.tokenHelp,
      ),
      h("button", { class: "primary", attrs: { type: "submit" } }, S.signIn),
    );
    const oidc = this.config.oidc;
    if (oidc) {
      form.append(button(S.signInWithProvider, () => void startOidcLogin(oidc)));
    }
    root.replaceChildren(h("div", { class: "signin-page" }, form), announcer);
    root.setAttribute("aria-busy", "false");
    token.focus();
  }

  signOut = (message: string): void => {
    forgetToken();
    this.signIn(message);
  };

  private async enter(): Promise<void> {
    try {
      this.me = await this.api.get<Me>("/me");
      useLanguage(this.api.spoken);
    } catch (error) {
      if (error instanceof ApiError && (error.status === 401 || error.status === 403)) {
        this.signOut(error.message);
      } else {
        this.signIn(error instanceof Error ? error.message : String(error));
      }
      return;
    }
    this.panels = new Panels({
      api: this.api,
      signOut: this.signOut,
      announce,
      answered: (conversationId, confirmationId, outcome, said, resume) => {
        this.tabs?.postMessage({ conversationId, confirmationId, outcome, said } satisfies Ended);
        void this.answered(conversationId, confirmationId, outcome, said, resume);
      },
    });
    const panelsToggle = h(
      "button",
      {
        attrs: { type: "button", "aria-expanded": "false", "aria-controls": "side" },
        class: "toggle",
      },
      S.panels,
    );
    const side = h("div", { attrs: { id: "side", hidden: "" } }, this.panels.element);
    panelsToggle.addEventListener("click", () => {
      const open = side.hidden;
      side.hidden = !open;
      panelsToggle.setAttribute("aria-expanded", String(open));
      if (open)
        void this.panels
          ?.show("settings")
          .then(() => side.querySelector<HTMLElement>("[role=tab]")?.focus());
    });
    side.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        side.hidden = true;
        panelsToggle.setAttribute("aria-expanded", "false");
        panelsToggle.focus();
      }
    });
    const header = h(
      "header",
      { class: "top" },
      h("a", { class: "skip", attrs: { href: "#composer" } }, S.skipToComposer),
      h("h1", {}, S.appName),
      h("span", { class: "who" }, this.whoLabel(this.me)),
      panelsToggle,
      button(S.signOut, () => this.signOut(S.signedOut)),
    );
    const nav = h(
      "nav",
      { class: "sidebar", attrs: { "aria-label": S.conversations } },
      button(S.newConversation, () => void this.open(newConversationId(), true), "primary"),
      this.list,
    );
    root.replaceChildren(header, h("div", { class: "layout" }, nav, this.main, side), announcer);
    root.setAttribute("aria-busy", "false");
    const conversations = await this.refreshList();
    const first = conversations[0];
    await this.open(first ? first.conversationId : newConversationId(), !first);
  }

  /** Whom the header names: how they asked to be called, else the directory's or token's. */
  private whoLabel(me: Me): string {
    const name = me.name ?? me.displayName;
    return name ? S.signedInAs(name) : S.signedIn;
  }

  private async refreshList(): Promise<ConversationSummary[]> {
    try {
      const { conversations } = await this.api.get<{ conversations: ConversationSummary[] }>(
        "/conversations",
        { limit: 50 },
      );
      const current = this.conversation?.id;
      // A conversation just started is listed before the archive has it.
      const shown =
        current && !conversations.some((item) => item.conversationId === current)
          ? [
              {
                conversationId: current,
                lastTimestamp: "",
                preview: "",
                title: S.newConversation,
              },
              ...conversations,
            ]
          : conversations;
      this.list.replaceChildren(
        ...shown.map((item) => {
          // The first question, else the newest message as plain words (an answer is Markdown).
          const title = item.title || plainText(item.preview) || item.conversationId;
          return h(
            "li",
            {},
            h(
              "button",
              {
                class: "conversation-link",
                attrs: {
                  type: "button",
                  title,
                  "data-id": item.conversationId,
                  "aria-current": String(item.conversationId === this.conversation?.id),
                },
                on: { click: () => void this.open(item.conversationId, false) },
              },
              h("span", { class: "conversation-title" }, title),
            ),
          );
        }),
      );
      return conversations;
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) this.signOut(error.message);
      return [];
    }
  }

  /** The Pending tab follows confirmations ended elsewhere: in the transcript, in another
   * tab of this UI (whose message also settles the open conversation's chip), and whatever
   * happened while the page was hidden or unfocused (only when it shows); so do the open
   * conversation's waiting chips, as the server recorded each end. */
  private watchConfirmations(): void {
    const refresh = () => void this.panels?.refresh("pending");
    const recheck = () => {
      refresh();
      void this.conversation?.check().catch(() => undefined); // unreachable: the timer asks
    };
    if (this.tabs) {
      this.tabs.onmessage = (event: MessageEvent<Ended>) => {
        const { conversationId, confirmationId, outcome, said } = event.data;
        if (this.conversation?.id === conversationId) {
          this.conversation.settled(confirmationId, outcome, said || undefined);
        }
        refresh();
      };
    }
    document.addEventListener("visibilitychange", () => {
      if (document.visibilityState === "visible") recheck();
    });
    window.addEventListener("focus", recheck);
  }

  /** A confirmation of the open conversation ended in its transcript. */
  private ended(conversationId: string, confirmationId: string, outcome: Settled, said: string) {
    this.tabs?.postMessage({ conversationId, confirmationId, outcome, said } satisfies Ended);
    void this.panels?.refresh("pending");
  }

  /** A confirmation answered from the Pending tab: the conversation it belongs to follows;
   * an action handing back opens its conversation to hear the model's answer. */
  private async answered(
    conversationId: string,
    confirmationId: string,
    outcome: Settled,
    said: string,
    resume: boolean,
  ): Promise<void> {
    if (this.conversation?.id !== conversationId) {
      if (!resume) return;
      await this.open(conversationId, false);
    }
    this.conversation?.settled(confirmationId, outcome, said || undefined, resume);
  }

  private async open(id: string, fresh: boolean): Promise<void> {
    this.conversation?.dispose();
    const conversation = new Conversation(
      {
        api: this.api,
        announce,
        signOut: this.signOut,
        changed: () => {
          void this.refreshList();
          void this.panels?.refresh("pending"); // the turn may have staged one
        },
        ended: (confirmationId, outcome, said) => this.ended(id, confirmationId, outcome, said),
      },
      id,
    );
    this.conversation = conversation;
    this.main.replaceChildren(conversation.element);
    void this.refreshList();
    if (fresh) {
      conversation.focus();
      if (this.me && this.me.name === null)
        await conversation.run({ opening: true, conversationId: id }, null);
      return;
    }
    await conversation.load();
    conversation.focus();
  }
}

void loadConfig().then((config) => new App(config).start());
