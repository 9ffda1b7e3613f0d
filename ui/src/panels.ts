// What the agent keeps of the person, read-only: the wiki, memory, the tool log, pending
// confirmations and plugins, plus the settings screen (name, language, time zone), the MCP
// servers the person signed in to (each can be signed out of) and the shared spaces with
// their preferences (spaces.ts).

import { type Api, ApiError, type Me, type PendingConfirmation } from "./api";
import { button, clear, h } from "./dom";
import { renderMarkdown } from "./markdown";
import { type Settled, takenSaying } from "./message";
import { SpacesView } from "./spaces";
import { strings as S } from "./strings";
import { UsageView } from "./usage";

interface Tab {
  id: string;
  label: string;
  render(panel: HTMLElement): Promise<void>;
}

export interface PanelsHost {
  api: Api;
  signOut(message: string): void;
  announce(text: string): void;
  /** A confirmation answered from the Pending tab: its conversation follows (its chip, and
   * the model's answer when the action hands back). */
  answered(
    conversationId: string,
    confirmationId: string,
    outcome: Settled,
    said: string,
    resume: boolean,
  ): void;
}

function pre(text: string): HTMLElement {
  return h("pre", { class: "note-text" }, text);
}

function json(value: unknown): string {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

export class Panels {
  readonly element: HTMLElement;
  private readonly tablist = h("div", {
    class: "tabs",
    attrs: { role: "tablist", "aria-label": S.whatMercuryKeeps },
  });
  private readonly panel = h("div", {
    class: "panel-body",
    attrs: { role: "tabpanel", tabindex: "0" },
  });
  private readonly tabs: Tab[];
  private current = "";
  private readonly spaces: SpacesView;

  constructor(private readonly host: PanelsHost) {
    this.spaces = new SpacesView(host);
    this.tabs = [
      { id: "settings", label: S.settings, render: (panel) => this.settings(panel) },
      { id: "wiki", label: S.wiki, render: (panel) => this.wiki(panel) },
      { id: "memory", label: S.memory, render: (panel) => this.memory(panel) },
      { id: "tool-log", label: S.toolLog, render: (panel) => this.toolLog(panel) },
      { id: "pending", label: S.pending, render: (panel) => this.pending(panel) },
      { id: "plugins", label: S.plugins, render: (panel) => this.plugins(panel) },
      { id: "connections", label: S.connections, render: (panel) => this.connections(panel) },
      { id: "spaces", label: S.spaces, render: (panel) => this.spaces.render(panel) },
      { id: "usage", label: S.usage, render: (panel) => new UsageView(host.api).render(panel) },
    ];
    for (const tab of this.tabs) {
      this.tablist.append(
        h(
          "button",
          {
            attrs: {
              type: "button",
              role: "tab",
              id: `tab-${tab.id}`,
              "aria-selected": "false",
              "aria-controls": "panel-body",
            },
            on: { click: () => void this.show(tab.id) },
          },
          tab.label,
        ),
      );
    }
    this.panel.id = "panel-body";
    this.element = h(
      "aside",
      { class: "panels", attrs: { "aria-label": S.sidePanel } },
      this.tablist,
      this.panel,
    );
  }

  async show(id: string): Promise<void> {
    const tab = this.tabs.find((candidate) => candidate.id === id) ?? this.tabs[0];
    if (!tab) return;
    this.current = tab.id;
    for (const element of this.tablist.querySelectorAll("button")) {
      element.setAttribute("aria-selected", String(element.id === `tab-${tab.id}`));
    }
    this.panel.setAttribute("aria-labelledby", `tab-${tab.id}`);
    clear(this.panel);
    this.panel.append(h("p", { class: "loading" }, S.loading));
    try {
      const body = h("div");
      await tab.render(body);
      if (this.current === tab.id) this.panel.replaceChildren(body);
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) this.host.signOut(error.message);
      const message = error instanceof Error ? error.message : String(error);
      this.panel.replaceChildren(h("p", { class: "error", attrs: { role: "alert" } }, message));
    }
  }

  /** Draws the tab again in place (no "Loading…" in between) when it is the one open and
   * showing; nothing otherwise, so a change elsewhere costs a request only when seen. */
  async refresh(id: string): Promise<void> {
    const tab = this.tabs.find((candidate) => candidate.id === id);
    if (!tab || this.current !== id || !this.element.isConnected) return;
    if (this.element.closest("[hidden]")) return;
    try {
      const body = h("div");
      await tab.render(body);
      if (this.current !== id) return;
      const focused = this.panel.contains(document.activeElement);
      this.panel.replaceChildren(body);
      if (focused) this.panel.focus(); // not lost to the page with the nodes it was on
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) this.host.signOut(error.message);
      // Otherwise the last drawing stays: the next change or visit draws it again.
    }
  }

  private async settings(panel: HTMLElement): Promise<void> {
    const me = await this.host.api.get<Me>("/me");
    const browserZone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    const zone = h("dd", {}, me.timeZone ?? S.timeZoneUnsaved);
    const status = h("p", { class: "note", attrs: { role: "status" } });
    panel.append(
      h("h2", {}, S.settings),
      h(
        "dl",
        {},
        h("dt", {}, S.name),
        h("dd", {}, me.name ?? S.nameUnknown),
        h("dt", {}, S.language),
        h("dd", {}, me.language ?? S.languageFromBrowser(navigator.language)),
        h("dt", {}, S.timeZone),
        zone,
      ),
    );
    if (me.timeZone !== browserZone) {
      panel.append(
        button(S.useBrowserZone(browserZone), async () => {
          try {
            const saved = await this.host.api.send<{ timeZone: string }>("PATCH", "/me", {
              timeZone: browserZone,
            });
            zone.textContent = saved.timeZone;
            status.textContent = S.timeZoneSaved(saved.timeZone);
          } catch (error) {
            status.textContent = error instanceof Error ? error.message : String(error);
          }
        }),
      );
    }
    panel.append(status);
  }

  private async wiki(panel: HTMLElement): Promise<void> {
    const { files } = await this.host.api.get<{ files: string[] }>("/wiki/list");
    const reader = h("div", { class: "wiki-note", attrs: { "aria-live": "polite" } });
    const results = h("div", { class: "grep-results" });
    const pattern = h("input", {
      attrs: {
        type: "search",
        "aria-label": S.searchTheWiki,
        placeholder: S.searchPlaceholder,
      },
    });
    const grep = h(
      "form",
      {
        class: "grep",
        attrs: { role: "search" },
        on: {
          submit: async (event) => {
            event.preventDefault();
            if (!pattern.value) return;
            try {
              const { matches } = await this.host.api.get<{
                matches: { path: string; line: number; text: string }[];
              }>("/wiki/grep", { pattern: pattern.value });
              results.replaceChildren(
                matches.length === 0
                  ? h("p", {}, S.nothingMatches)
                  : h(
                      "ul",
                      {},
                      ...matches.map((m) =>
                        h("li", {}, h("code", {}, `${m.path}:${m.line}`), " ", m.text),
                      ),
                    ),
              );
            } catch (error) {
              results.replaceChildren(
                h("p", { class: "error" }, error instanceof Error ? error.message : String(error)),
              );
            }
          },
        },
      },
      pattern,
      h("button", { attrs: { type: "submit" } }, S.search),
    );
    const list = h("ul", { class: "wiki-files" });
    for (const path of files) {
      list.append(
        h(
          "li",
          {},
          button(
            path,
            async () => {
              try {
                const { content } = await this.host.api.get<{ content: string }>("/wiki/read", {
                  path,
                });
                reader.replaceChildren(h("h3", {}, path), pre(content));
              } catch (error) {
                reader.replaceChildren(
                  h(
                    "p",
                    { class: "error" },
                    error instanceof Error ? error.message : String(error),
                  ),
                );
              }
            },
            "link",
          ),
        ),
      );
    }
    panel.append(
      h("h2", {}, S.wiki),
      grep,
      results,
      files.length ? list : h("p", {}, S.noNotes),
      reader,
    );
  }

  private async memory(panel: HTMLElement): Promise<void> {
    const select = h(
      "select",
      { attrs: { "aria-label": S.collection } },
      h("option", { attrs: { value: "verbatim_archive" } }, S.archive),
      h("option", { attrs: { value: "episodic_memory" } }, S.episodes),
      h("option", { attrs: { value: "semantic_facts" } }, S.facts),
    );
    const list = h("ol", { class: "points" });
    const more = button(S.more, () => void page(offset));
    let offset: string | null = null;
    const page = async (from: string | null) => {
      const answer = await this.host.api.get<{
        points: { id: string; payload: Record<string, unknown> }[];
        nextOffset: string | null;
      }>("/memory/scroll", { collection: select.value, limit: 20, offset: from });
      for (const point of answer.points) {
        const text = point.payload.text ?? point.payload.content ?? point.payload.summary;
        // The archive keeps Markdown: rendered as answers are (raw HTML shown as text).
        list.append(
          typeof text === "string"
            ? h("li", { class: "markdown" }, renderMarkdown(text))
            : h("li", {}, json(point.payload)),
        );
      }
      offset = answer.nextOffset;
      more.hidden = offset === null;
      if (answer.points.length === 0 && from === null) list.append(h("li", {}, S.nothingKept));
    };
    select.addEventListener("change", () => {
      list.replaceChildren();
      void page(null);
    });
    panel.append(h("h2", {}, S.memory), select, list, more);
    await page(null);
  }

  private async toolLog(panel: HTMLElement): Promise<void> {
    const { entries } = await this.host.api.get<{
      entries: {
        timestamp: string;
        toolName: string;
        input: unknown;
        output: unknown;
        outcome: string;
      }[];
    }>("/tool-log");
    panel.append(h("h2", {}, S.toolLog));
    if (entries.length === 0) {
      panel.append(h("p", {}, S.noToolCalls));
      return;
    }
    panel.append(
      h(
        "ol",
        { class: "tool-log" },
        ...entries.map((entry) =>
          h(
            "li",
            { class: `outcome-${entry.outcome}` },
            h("strong", {}, entry.toolName),
            ` · ${entry.outcome} · ${new Date(entry.timestamp).toLocaleString()}`,
            h(
              "details",
              {},
              h("summary", {}, S.inputAndOutput),
              pre(json(entry.input)),
              pre(json(entry.output)),
            ),
          ),
        ),
      ),
    );
  }

  private async pending(panel: HTMLElement): Promise<void> {
    const { pending } = await this.host.api.get<{ pending: PendingConfirmation[] }>(
      "/confirmations",
    );
    panel.append(h("h2", {}, S.pendingConfirmations));
    panel.append(
      pending.length === 0
        ? h("p", {}, S.nothingWaits)
        : h("ul", { class: "pending-list" }, ...pending.map((item) => this.pendingItem(item))),
    );
  }

  /** One pending confirmation with its choices and a Cancel, answered by its id. Those of a
   * one-off message or a shared space are answered where they were asked. */
  private pendingItem(item: PendingConfirmation): HTMLElement {
    const entry = h(
      "li",
      {},
      item.summary,
      h("span", { class: "muted" }, S.until(new Date(item.expiresAt).toLocaleTimeString())),
    );
    const conversationId = item.conversationId;
    if (conversationId === null) return entry;
    const buttons = h("div", {
      class: "choices",
      attrs: { role: "group", "aria-label": S.waitingForConfirmation },
    });
    const press = (index: number | null) => async () => {
      for (const other of buttons.querySelectorAll("button")) other.disabled = true;
      try {
        const answer = await this.host.api.answer(
          item.id,
          index === null ? { cancel: true } : { choice: index },
        );
        const outcome: Settled = answer.cancelled ? "cancelled" : "taken";
        const said = index === null ? "" : takenSaying(item.choices, index);
        this.host.answered(conversationId, item.id, outcome, said, answer.resume === true);
        const note = answer.text ?? S.confirmed;
        buttons.replaceWith(h("p", { class: "note" }, note));
        this.host.announce(note);
      } catch (error) {
        if (error instanceof ApiError && error.status === 401) {
          this.host.signOut(error.message);
          return;
        }
        const gone = error instanceof ApiError && error.status === 404;
        if (gone) this.host.answered(conversationId, item.id, "gone", "", false);
        const note = gone ? S.choiceGone : error instanceof Error ? error.message : S.unreachable;
        buttons.replaceWith(h("p", { class: gone ? "note" : "error" }, note));
        this.host.announce(note);
      }
    };
    item.choices.forEach((choice, index) => {
      buttons.append(button(choice.label || S.confirm, () => void press(index)()));
    });
    if (!item.choices.some((choice) => choice.kind === "cancel")) {
      buttons.append(button(S.cancel, () => void press(null)()));
    }
    entry.append(buttons);
    return entry;
  }

  private async plugins(panel: HTMLElement): Promise<void> {
    const { manifest } = await this.host.api.get<{
      manifest: { plugins: { name: string; active: boolean; skills: unknown[] }[] };
    }>("/manifest");
    panel.append(
      h("h2", {}, S.plugins),
      h(
        "ul",
        {},
        ...manifest.plugins.map((plugin) =>
          h("li", {}, h("strong", {}, plugin.name), plugin.active ? S.active : S.inactive),
        ),
      ),
    );
  }

  private async connections(panel: HTMLElement): Promise<void> {
    const { connections } = await this.host.api.get<{
      connections: { server: string; title: string; issuer: string | null; scopes: string[] }[];
    }>("/me/connections");
    const status = h("p", { class: "note", attrs: { role: "status" } });
    panel.append(h("h2", {}, S.connections), h("p", { class: "muted" }, S.connectionsHelp));
    if (connections.length === 0) {
      panel.append(h("p", {}, S.noConnections));
      return;
    }
    const list = h("ul", { class: "connections" });
    for (const connection of connections) {
      const item = h(
        "li",
        {},
        h("strong", {}, connection.title),
        connection.issuer ? S.signedInThrough(connection.issuer) : null,
        connection.scopes.length > 0 ? S.grantedScopes(connection.scopes.join(" ")) : null,
        " ",
      );
      item.append(
        button(S.signOutOf(connection.title), async () => {
          try {
            const path = `/me/connections/${encodeURIComponent(connection.server)}`;
            await this.host.api.send("DELETE", path);
            item.remove();
            status.textContent = S.signedOutOf(connection.title);
            if (list.children.length === 0) list.replaceWith(h("p", {}, S.noConnections));
          } catch (error) {
            status.textContent = error instanceof Error ? error.message : String(error);
          }
        }),
      );
      list.append(item);
    }
    panel.append(list, status);
  }
}
