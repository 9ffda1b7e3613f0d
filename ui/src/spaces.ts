// The Spaces tab: the shared spaces the person is in (GET /spaces) and, for the one chosen, its
// members, preferences, mutes and runtime settings, and for an admin a way to delete it; above
// them, for an approver, the pairings waiting (space_admin.ts holds those pieces). Every member
// reads the preferences, a role with prefs.set adds, changes and deletes them. The limits the
// server holds are checked here first, so nobody sends what it would refuse; when it refuses
// anyway (a full space, a role taken away meanwhile) its sentence is shown.

import { type Api, ApiError, type Me } from "./api";
import { h } from "./dom";
import {
  confirmation,
  deleteSpace,
  type Member,
  membersList,
  messageOf,
  People,
  pairings,
  SpaceMutes,
  SpaceSettings,
  when,
} from "./space_admin";
import { strings as S } from "./strings";

export interface Space {
  spaceId: string;
  platform: string;
  isDm: boolean;
  title: string | null;
  role: "admin" | "member";
  permissions: string[];
}

export interface Preference {
  key: string;
  value: string;
  createdBy: string;
  createdAt: string;
  updatedAt: string;
}

export interface SpacesHost {
  api: Api;
  signOut(message: string): void;
  announce(text: string): void;
}

// The server's rules (core/spaces/preferences.py): the key as it is, the value trimmed and
// counted in characters (code points, as Python counts them), not UTF-16 units.
const PREFERENCE_KEY = /^[a-z0-9][a-z0-9._-]{0,63}$/;
const MAX_VALUE_CHARS = 500;

function characters(text: string): number {
  return [...text].length;
}

function prefsPath(spaceId: string, key?: string): string {
  const space = `/spaces/${encodeURIComponent(spaceId)}/prefs`;
  return key === undefined ? space : `${space}/${encodeURIComponent(key)}`;
}

/** A section's own failure, in its place, so the others still show. */
function failed(host: SpacesHost, error: unknown): HTMLElement {
  if (error instanceof ApiError && error.status === 401) host.signOut(error.message);
  return h("p", { class: "error", attrs: { role: "alert" } }, messageOf(error));
}

export class SpacesView {
  /** The space last chosen, kept while the person visits the other tabs. */
  private selected: string | null = null;

  constructor(private readonly host: SpacesHost) {}

  async render(panel: HTMLElement): Promise<void> {
    // Only an approver asks for the pairings: anyone else's request would be a 403.
    const [{ spaces }, me] = await Promise.all([
      this.host.api.get<{ spaces: Space[] }>("/spaces"),
      this.host.api.get<Me>("/me"),
    ]);
    const waiting = me.approver ? await pairings(this.host) : null;
    panel.append(h("h2", {}, S.spaces));
    if (waiting) panel.append(waiting);
    const first = spaces.find((space) => space.spaceId === this.selected) ?? spaces[0];
    if (!first) {
      panel.append(h("p", {}, S.noSpaces));
      return;
    }
    const select = h(
      "select",
      { attrs: { id: "space" } },
      ...spaces.map((space) =>
        h(
          "option",
          { attrs: { value: space.spaceId } },
          space.title ? `${space.title} (${space.spaceId})` : space.spaceId,
        ),
      ),
    );
    select.value = first.spaceId;
    const body = h("div", { class: "space" });
    select.addEventListener("change", () => {
      const space = spaces.find((candidate) => candidate.spaceId === select.value);
      if (space) void this.open(space, body);
    });
    panel.append(
      h("div", { class: "space-picker" }, h("label", { attrs: { for: "space" } }, S.space), select),
      body,
    );
    await this.open(first, body);
  }

  private async open(space: Space, body: HTMLElement): Promise<void> {
    this.selected = space.spaceId;
    const role = S.roles[space.role] ?? space.role;
    const may = space.permissions.includes("prefs.set") ? S.adminMay : S.memberMay;
    const intro = h("p", { class: "muted space-intro" }, `${S.yourRole(role)} `, may);
    body.replaceChildren(intro, h("p", { class: "loading" }, S.loading));
    const allowed = (permission: string) => space.permissions.includes(permission);
    // The members first: their names are how the other sections show people.
    let members: Member[] = [];
    let membersPart: HTMLElement;
    try {
      ({ members } = await this.host.api.get<{ members: Member[] }>(
        `/spaces/${encodeURIComponent(space.spaceId)}`,
      ));
      membersPart = membersList(members);
    } catch (error) {
      membersPart = failed(this.host, error);
    }
    const people = new People(members);
    const parts: Promise<HTMLElement>[] = [];
    if (allowed("prefs.get")) {
      const preferences = new SpacePreferences(this.host, space, people);
      parts.push(this.loaded(preferences.element, () => preferences.reload()));
    } else {
      parts.push(Promise.resolve(h("p", {}, S.cannotReadPreferences)));
    }
    if (allowed("mute")) {
      const mutes = new SpaceMutes(this.host, space.spaceId, people);
      mutes.candidates(members);
      parts.push(this.loaded(mutes.element, () => mutes.reload()));
    }
    if (allowed("config.get")) {
      const settings = new SpaceSettings(this.host, space.spaceId, allowed("config.set"));
      parts.push(this.loaded(settings.element, () => settings.reload()));
    }
    const sections = await Promise.all(parts);
    if (allowed("space.delete")) {
      sections.push(
        deleteSpace(
          this.host,
          space.spaceId,
          space.title,
          (spaceId) => void this.deleted(spaceId, body),
        ),
      );
    }
    // The person may have chosen another space while this one loaded.
    if (this.selected === space.spaceId) body.replaceChildren(intro, membersPart, ...sections);
  }

  private async loaded(element: HTMLElement, load: () => Promise<void>): Promise<HTMLElement> {
    try {
      await load();
      return element;
    } catch (error) {
      return failed(this.host, error);
    }
  }

  /** The space is gone: the tab is drawn anew without it, and the person is told. */
  private async deleted(spaceId: string, body: HTMLElement): Promise<void> {
    this.selected = null;
    const panel = body.parentElement;
    if (!panel) return;
    const drawn = h("div");
    try {
      await this.render(drawn);
    } catch (error) {
      drawn.replaceChildren(failed(this.host, error));
    }
    const note = h("p", { class: "note", attrs: { tabindex: "-1" } }, S.spaceDeleted(spaceId));
    panel.replaceChildren(note, ...drawn.childNodes);
    this.host.announce(S.spaceDeleted(spaceId));
    (panel.querySelector<HTMLElement>("#space") ?? note).focus();
  }
}

/** One space's preferences: the list, and for a role with prefs.set the form and deletes. */
class SpacePreferences {
  readonly element: HTMLElement;
  private readonly list = h("ul", { class: "prefs" });
  private readonly canSet: boolean;
  private readonly key = h("input", {
    attrs: {
      id: "pref-key",
      autocomplete: "off",
      autocapitalize: "none",
      spellcheck: "false",
      "aria-describedby": "pref-key-help",
    },
  });
  private readonly value = h("textarea", {
    attrs: { id: "pref-value", rows: "3", "aria-describedby": "pref-value-count" },
  });
  private readonly count = h("p", { class: "muted counter", attrs: { id: "pref-value-count" } });
  private readonly problem = h("p", { class: "error", attrs: { role: "alert" } });
  private readonly status = h("p", { class: "note", attrs: { role: "status" } });
  private readonly save = h("button", { class: "primary", attrs: { type: "submit" } }, S.save);

  constructor(
    private readonly host: SpacesHost,
    private readonly space: Space,
    private readonly people: People,
  ) {
    this.canSet = space.permissions.includes("prefs.set");
    this.element = h(
      "section",
      { class: "space-prefs", attrs: { "aria-labelledby": "prefs-title" } },
      h("h3", { attrs: { id: "prefs-title" } }, S.preferences),
      this.list,
      this.status,
    );
    if (this.canSet) this.element.append(this.form());
  }

  async reload(): Promise<void> {
    const { preferences } = await this.host.api.get<{ preferences: Preference[] }>(
      prefsPath(this.space.spaceId),
    );
    this.list.replaceChildren(
      ...(preferences.length === 0
        ? [h("li", { class: "muted" }, S.noPreferences)]
        : preferences.map((preference) => this.item(preference))),
    );
  }

  private item(preference: Preference): HTMLElement {
    const created = when(preference.createdAt);
    const updated = when(preference.updatedAt);
    const place = h("div");
    const remove: HTMLButtonElement = h(
      "button",
      {
        class: "danger",
        attrs: { type: "button", "aria-label": S.deletePreference(preference.key) },
        on: {
          click: () =>
            place.replaceChildren(
              confirmation(S.deletePreferenceQuestion(preference.key), remove, () =>
                this.remove(preference.key),
              ),
            ),
        },
      },
      S.delete,
    );
    const actions = this.canSet
      ? h(
          "span",
          { class: "pref-actions" },
          h(
            "button",
            {
              attrs: { type: "button", "aria-label": S.changePreference(preference.key) },
              on: { click: () => this.edit(preference) },
            },
            S.change,
          ),
          remove,
        )
      : null;
    return h(
      "li",
      { class: "pref", attrs: { "data-key": preference.key } },
      h("div", { class: "pref-head" }, h("code", { class: "pref-key" }, preference.key), actions),
      place,
      h("p", { class: "pref-value" }, preference.value),
      h(
        "p",
        { class: "pref-meta muted" },
        ...S.setBy(this.people.element(preference.createdBy), created),
        updated !== created ? S.changedAt(updated) : null,
      ),
    );
  }

  private form(): HTMLElement {
    this.value.addEventListener("input", () => this.counted());
    this.key.addEventListener("input", () => this.key.removeAttribute("aria-invalid"));
    this.counted();
    return h(
      "form",
      {
        class: "pref-form",
        attrs: { novalidate: "", "aria-labelledby": "pref-form-title" },
        on: {
          submit: (event) => {
            event.preventDefault();
            void this.submit();
          },
        },
      },
      h("h3", { attrs: { id: "pref-form-title" } }, S.addOrChange),
      h("label", { attrs: { for: "pref-key" } }, S.key),
      this.key,
      h("p", { class: "muted help", attrs: { id: "pref-key-help" } }, S.keyHelp),
      h("label", { attrs: { for: "pref-value" } }, S.value),
      this.value,
      this.count,
      this.problem,
      h("div", {}, this.save),
    );
  }

  /** The live count under the value, marked once it passes the limit. */
  private counted(): void {
    const count = characters(this.value.value.trim());
    this.count.textContent = S.valueCount(count, MAX_VALUE_CHARS);
    this.count.classList.toggle("over", count > MAX_VALUE_CHARS);
    if (count <= MAX_VALUE_CHARS) this.value.removeAttribute("aria-invalid");
  }

  private edit(preference: Preference): void {
    this.key.value = preference.key;
    this.value.value = preference.value;
    this.counted();
    this.problem.textContent = "";
    this.value.focus();
  }

  /** The form's first fault as a sentence, with its field marked and focused; null if none. */
  private fault(key: string, value: string): string | null {
    const count = characters(value);
    let field: HTMLInputElement | HTMLTextAreaElement = this.value;
    let sentence: string;
    if (!PREFERENCE_KEY.test(key)) {
      field = this.key;
      sentence = S.badKey;
    } else if (count === 0) {
      sentence = S.emptyValue;
    } else if (count > MAX_VALUE_CHARS) {
      sentence = S.valueTooLong(count, MAX_VALUE_CHARS);
    } else {
      return null;
    }
    field.setAttribute("aria-invalid", "true");
    field.focus();
    return sentence;
  }

  private async submit(): Promise<void> {
    const key = this.key.value.trim();
    const value = this.value.value.trim();
    this.status.textContent = "";
    const fault = this.fault(key, value);
    this.problem.textContent = fault ?? "";
    if (fault) return;
    this.save.disabled = true;
    try {
      const { created } = await this.host.api.send<{ created: boolean }>(
        "PUT",
        prefsPath(this.space.spaceId, key),
        { value },
      );
      this.key.value = "";
      this.value.value = "";
      this.counted();
      await this.reload();
      this.status.textContent = created ? S.preferenceAdded(key) : S.preferenceChanged(key);
      this.key.focus();
    } catch (error) {
      this.refused(error);
    } finally {
      this.save.disabled = false;
    }
  }

  private async remove(key: string): Promise<void> {
    this.status.textContent = "";
    this.problem.textContent = "";
    try {
      await this.host.api.send("DELETE", prefsPath(this.space.spaceId, key));
      await this.reload();
      this.status.textContent = S.preferenceDeleted(key);
      // The button pressed is gone with its row: focus goes on to the form.
      this.key.focus();
    } catch (error) {
      this.refused(error);
    }
  }

  private refused(error: unknown): void {
    if (error instanceof ApiError && error.status === 401) {
      this.host.signOut(error.message);
      return;
    }
    this.problem.textContent = messageOf(error);
  }
}
