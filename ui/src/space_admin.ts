// The Spaces tab's pieces beyond preferences: who is in a space (GET /spaces/{space}), its
// mutes (two-step, as the server's route is), its runtime settings, deleting the space, and
// the pairings waiting for an admin (GET /pairing). A person is shown by name wherever the
// server knows one, with their id on hover; the limits the server holds are checked here first.

import { type Api, ApiError } from "./api";
import { h } from "./dom";
import { strings as S } from "./strings";

export interface AdminHost {
  api: Api;
  signOut(message: string): void;
}

export interface Member {
  id: string;
  name: string | null;
  role: "admin" | "member";
}

export interface Mute {
  person: string;
  name?: string | null;
  until: string;
  reason: string | null;
  by: string;
}

export type SettingValue = number | string | boolean;

export interface Setting {
  key: string;
  value: SettingValue | null;
  source: "space" | "file" | "global";
  bounds?: { min?: number; max?: number; choices?: string[]; maxChars?: number };
}

export interface Pairing {
  code: string;
  platform: string;
  account: string;
  name: string | null;
  requestedAt: string;
  expiresAt: string;
}

/** An account an approver let in (GET /pairing/admitted). */
export interface Admitted {
  account: string;
  name: string | null;
  approvedBy: string;
  approvedAt: string;
}

/** The account a request came from as the server names it elsewhere (`telegram:5550001`). */
const accountOf = (pairing: Pairing): string => `${pairing.platform}:${pairing.account}`;

export function when(iso: string): string {
  return new Date(iso).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}

export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export function spacePath(spaceId: string, ...rest: string[]): string {
  return ["/spaces", ...[spaceId, ...rest].map(encodeURIComponent)].join("/");
}

/** Names of the people of a space, by id; an id it doesn't know is shown as it is. */
export class People {
  private readonly names = new Map<string, string>();

  constructor(members: Member[] = []) {
    for (const member of members) if (member.name) this.names.set(member.id, member.name);
  }

  name(id: string, given?: string | null): string {
    return given || this.names.get(id) || id;
  }

  /** The person's name, with their id on hover (and for the curious, in the title). */
  element(id: string, given?: string | null): HTMLElement {
    return h("span", { class: "person", attrs: { title: id } }, this.name(id, given));
  }
}

/**
 * A question with Confirm and Cancel, shown in place of the action it confirms. Focus goes to
 * Cancel (nothing is lost by a stray Enter) and back to `opener` when it's cancelled (Cancel,
 * or Escape).
 */
export function confirmation(
  question: string,
  opener: HTMLElement | null,
  onConfirm: () => Promise<void>,
): HTMLElement {
  const yes = h("button", { class: "danger", attrs: { type: "button" } }, S.confirm);
  const no = h("button", { attrs: { type: "button" } }, S.cancel);
  const box = h(
    "div",
    { class: "confirm-box", attrs: { role: "group", "aria-label": S.confirmation } },
    h("p", { class: "confirm-question" }, question),
    h("div", { class: "confirm-actions" }, yes, no),
  );
  const cancel = () => {
    box.remove();
    opener?.focus();
  };
  no.addEventListener("click", cancel);
  // Escape cancels the question, not the whole side panel it sits in.
  box.addEventListener("keydown", (event) => {
    if (event.key !== "Escape" || yes.disabled) return;
    event.stopPropagation();
    cancel();
  });
  yes.addEventListener("click", () => {
    yes.disabled = true;
    no.disabled = true;
    void onConfirm().finally(() => box.remove());
  });
  queueMicrotask(() => no.focus());
  return box;
}

function refusal(host: AdminHost, error: unknown, problem: HTMLElement): void {
  if (error instanceof ApiError && error.status === 401) {
    host.signOut(error.message);
    return;
  }
  problem.textContent = messageOf(error);
}

// ---- Members -----------------------------------------------------------------------------

export function membersList(members: Member[]): HTMLElement {
  const people = new People(members);
  return h(
    "section",
    { class: "members", attrs: { "aria-labelledby": "members-title" } },
    h("h3", { attrs: { id: "members-title" } }, S.members),
    h(
      "ul",
      { class: "member-list" },
      ...members.map((member) =>
        h(
          "li",
          { class: "member", attrs: { "data-id": member.id } },
          people.element(member.id, member.name),
          h("span", { class: "muted role" }, S.roles[member.role] ?? member.role),
        ),
      ),
    ),
  );
}

// ---- Mutes -------------------------------------------------------------------------------

// The server's rules (core/spaces/mutes.py): 10m, 1h, 7d; from a minute to 30 days.
const DURATION = /^([0-9]{1,6})([mhd])$/;
const MINUTES = { m: 1, h: 60, d: 1440 } as Record<string, number>;
const MAX_MUTE_MINUTES = 30 * 1440;
const MAX_REASON_CHARS = 500;

export function durationFault(text: string): boolean {
  const found = DURATION.exec(text.trim());
  if (!found) return true;
  const minutes = Number(found[1]) * (MINUTES[found[2] ?? ""] ?? 0);
  return minutes < 1 || minutes > MAX_MUTE_MINUTES;
}

/** A space's mutes: the list with Unmute, and the two-step form to mute someone. */
export class SpaceMutes {
  readonly element: HTMLElement;
  private readonly list = h("ul", { class: "entries mutes" });
  private readonly person = h("select", { attrs: { id: "mute-person" } });
  private readonly duration = h("input", {
    attrs: {
      id: "mute-duration",
      autocomplete: "off",
      spellcheck: "false",
      "aria-describedby": "mute-duration-help",
    },
  });
  private readonly reason = h("input", { attrs: { id: "mute-reason", autocomplete: "off" } });
  private readonly problem = h("p", { class: "error", attrs: { role: "alert" } });
  private readonly status = h("p", { class: "note", attrs: { role: "status" } });
  private readonly submit = h("button", { class: "primary", attrs: { type: "submit" } }, S.mute);
  private readonly pending = h("div", { class: "mute-pending" });

  constructor(
    private readonly host: AdminHost,
    private readonly spaceId: string,
    private people: People,
  ) {
    this.element = h(
      "section",
      { class: "space-mutes", attrs: { "aria-labelledby": "mutes-title" } },
      h("h3", { attrs: { id: "mutes-title" } }, S.mutes),
      this.list,
      this.status,
      this.form(),
    );
  }

  /** Who may be muted: the members who aren't admins (an admin can't be muted). */
  candidates(members: Member[]): void {
    this.people = new People(members);
    const mutable = members.filter((member) => member.role !== "admin");
    this.person.replaceChildren(
      ...mutable.map((member) =>
        h(
          "option",
          { attrs: { value: member.id } },
          member.name ? `${member.name} (${member.id})` : member.id,
        ),
      ),
    );
    this.submit.disabled = mutable.length === 0;
  }

  async reload(): Promise<void> {
    const { mutes } = await this.host.api.get<{ mutes: Mute[] }>(spacePath(this.spaceId, "mutes"));
    this.list.replaceChildren(
      ...(mutes.length === 0
        ? [h("li", { class: "muted" }, S.noMutes)]
        : mutes.map((mute) => this.item(mute))),
    );
  }

  private item(mute: Mute): HTMLElement {
    const name = this.people.name(mute.person, mute.name);
    return h(
      "li",
      { class: "entry mute", attrs: { "data-person": mute.person } },
      h(
        "div",
        { class: "entry-head" },
        this.people.element(mute.person, mute.name),
        h(
          "span",
          { class: "entry-actions" },
          h(
            "button",
            {
              attrs: { type: "button", "aria-label": S.unmutePerson(name) },
              on: { click: () => void this.unmute(mute.person, name) },
            },
            S.unmute,
          ),
        ),
      ),
      h(
        "p",
        { class: "entry-meta muted" },
        S.mutedUntil(when(mute.until)),
        " · ",
        S.mutedBy,
        " ",
        this.people.element(mute.by),
        mute.reason ? ` · ${mute.reason}` : null,
      ),
    );
  }

  private form(): HTMLElement {
    this.duration.addEventListener("input", () => this.duration.removeAttribute("aria-invalid"));
    this.reason.addEventListener("input", () => this.reason.removeAttribute("aria-invalid"));
    return h(
      "form",
      {
        class: "entry-form mute-form",
        attrs: { novalidate: "", "aria-labelledby": "mute-form-title" },
        on: {
          submit: (event) => {
            event.preventDefault();
            void this.ask();
          },
        },
      },
      h("h3", { attrs: { id: "mute-form-title" } }, S.muteSomeone),
      h("label", { attrs: { for: "mute-person" } }, S.person),
      this.person,
      h("label", { attrs: { for: "mute-duration" } }, S.forHowLong),
      this.duration,
      h("p", { class: "muted help", attrs: { id: "mute-duration-help" } }, S.durationHelp),
      h("label", { attrs: { for: "mute-reason" } }, S.reasonOptional),
      this.reason,
      this.problem,
      h("div", {}, this.submit),
      this.pending,
    );
  }

  private body(confirm: boolean): Record<string, unknown> {
    const reason = this.reason.value.trim();
    return {
      person: this.person.value,
      duration: this.duration.value.trim(),
      ...(reason ? { reason } : {}),
      ...(confirm ? { confirm: true } : {}),
    };
  }

  /** The first step: the server's reminder, changing nothing, and a Confirm under it. */
  private async ask(): Promise<void> {
    this.status.textContent = "";
    this.problem.textContent = "";
    this.pending.replaceChildren();
    if (durationFault(this.duration.value)) {
      this.duration.setAttribute("aria-invalid", "true");
      this.duration.focus();
      this.problem.textContent = S.badDuration;
      return;
    }
    if ([...this.reason.value.trim()].length > MAX_REASON_CHARS) {
      this.reason.setAttribute("aria-invalid", "true");
      this.reason.focus();
      this.problem.textContent = S.reasonTooLong(MAX_REASON_CHARS);
      return;
    }
    const body = this.body(false);
    this.submit.disabled = true;
    try {
      // The notice, for a person: the Confirm under it is the UI's own.
      const { notice } = await this.host.api.send<{ notice: string }>(
        "POST",
        spacePath(this.spaceId, "mutes"),
        body,
      );
      this.pending.append(confirmation(notice, this.submit, () => this.apply(body)));
    } catch (error) {
      refusal(this.host, error, this.problem);
    } finally {
      this.submit.disabled = false;
    }
  }

  /** The second step: the same request with confirm: true. */
  private async apply(body: Record<string, unknown>): Promise<void> {
    try {
      const { mute } = await this.host.api.send<{ mute: Mute }>(
        "POST",
        spacePath(this.spaceId, "mutes"),
        { ...body, confirm: true },
      );
      this.duration.value = "";
      this.reason.value = "";
      await this.reload();
      this.status.textContent = S.personMuted(
        this.people.name(mute.person, mute.name),
        when(mute.until),
      );
      this.person.focus();
    } catch (error) {
      refusal(this.host, error, this.problem);
      this.submit.focus();
    }
  }

  private async unmute(person: string, name: string): Promise<void> {
    this.status.textContent = "";
    this.problem.textContent = "";
    try {
      await this.host.api.send("DELETE", spacePath(this.spaceId, "mutes", person));
      await this.reload();
      this.status.textContent = S.personUnmuted(name);
      this.person.focus();
    } catch (error) {
      refusal(this.host, error, this.problem);
    }
  }
}

// ---- Settings ----------------------------------------------------------------------------

type Kind =
  | { type: "int"; min: number; max: number | null }
  | { type: "choice"; choices: string[] }
  | { type: "bool" }
  | { type: "text"; maxChars: number | null };

// The server's bounds (the contract of GET /spaces/{space}/settings); a `bounds` it sends
// narrows them further, and a key this table doesn't know is typed by its value.
const KINDS: Record<string, Kind> = {
  rate_limit: { type: "int", min: 1, max: 1000 },
  "trigger.match": { type: "choice", choices: ["mention", "prefix", "always"] },
  "trigger.pattern": { type: "text", maxChars: 64 },
  "trigger.media_in_groups": { type: "bool" },
  "ambient.max_messages": { type: "int", min: 0, max: 500 },
  "ambient.max_chars": { type: "int", min: 0, max: 100000 },
  live_answers: { type: "bool" },
};

export function kindOf(setting: Setting): Kind {
  const bounds = setting.bounds ?? {};
  const known = KINDS[setting.key];
  const kind: Kind =
    known ??
    (typeof setting.value === "boolean"
      ? { type: "bool" }
      : typeof setting.value === "number"
        ? { type: "int", min: Number.MIN_SAFE_INTEGER, max: null }
        : { type: "text", maxChars: null });
  if (kind.type === "int") {
    return {
      type: "int",
      min: typeof bounds.min === "number" ? bounds.min : kind.min,
      max: typeof bounds.max === "number" ? bounds.max : kind.max,
    };
  }
  if (kind.type === "choice" && Array.isArray(bounds.choices) && bounds.choices.length > 0) {
    return { type: "choice", choices: bounds.choices };
  }
  if (kind.type === "text" && typeof bounds.maxChars === "number") {
    return { type: "text", maxChars: bounds.maxChars };
  }
  return kind;
}

/** The typed value the field holds, or the sentence saying why it can't be sent. */
export function parseSetting(kind: Kind, raw: string): { value: SettingValue } | { fault: string } {
  const text = raw.trim();
  if (kind.type === "bool") return { value: text === "true" };
  if (kind.type === "choice") {
    return kind.choices.includes(text) ? { value: text } : { fault: S.pickOne };
  }
  if (kind.type === "int") {
    const wrong = {
      fault: kind.max === null ? S.wholeNumberFrom(kind.min) : S.wholeNumber(kind.min, kind.max),
    };
    if (!/^-?[0-9]+$/.test(text)) return wrong;
    const value = Number(text);
    if (value < kind.min || (kind.max !== null && value > kind.max)) return wrong;
    return { value };
  }
  if (!text) return { fault: S.emptySetting };
  if (kind.maxChars !== null && [...text].length > kind.maxChars) {
    return { fault: S.settingTooLong(kind.maxChars) };
  }
  return { value: text };
}

function shown(value: SettingValue | null): string {
  if (value === null) return S.notSet;
  if (typeof value === "boolean") return value ? S.on : S.off;
  return String(value);
}

function fieldId(key: string): string {
  return `setting-${key.replace(/[^a-z0-9_-]/gi, "-")}`;
}

/** A space's runtime settings: read by members, set and reset per key by an admin. */
export class SpaceSettings {
  readonly element: HTMLElement;
  private readonly list = h("ul", { class: "entries settings" });
  private readonly status = h("p", { class: "note", attrs: { role: "status" } });

  constructor(
    private readonly host: AdminHost,
    private readonly spaceId: string,
    private readonly canSet: boolean,
  ) {
    this.element = h(
      "section",
      { class: "space-settings", attrs: { "aria-labelledby": "settings-title" } },
      h("h3", { attrs: { id: "settings-title" } }, S.spaceSettings),
      h("p", { class: "muted help" }, canSet ? S.settingsAdminMay : S.settingsMemberMay),
      this.list,
      this.status,
    );
  }

  async reload(): Promise<void> {
    const { settings } = await this.host.api.get<{ settings: Setting[] }>(
      spacePath(this.spaceId, "settings"),
    );
    this.list.replaceChildren(...settings.map((setting) => this.item(setting)));
  }

  private item(setting: Setting): HTMLElement {
    const kind = kindOf(setting);
    const id = fieldId(setting.key);
    const label = S.settingLabels[setting.key] ?? setting.key;
    const source = h("span", { class: "muted setting-source" }, S.sources[setting.source] ?? "");
    const row = h("li", { class: "entry setting", attrs: { "data-key": setting.key } });
    const head = h(
      "div",
      { class: "setting-head" },
      this.canSet
        ? h("label", { attrs: { for: id } }, label)
        : h("span", { class: "setting-label" }, label),
      h("code", { class: "entry-key" }, setting.key),
    );
    if (!this.canSet) {
      row.append(head, h("p", { class: "setting-value" }, shown(setting.value), " · ", source));
      return row;
    }
    const field = this.field(kind, id, setting.value);
    const problem = h("p", { class: "error", attrs: { role: "alert", id: `${id}-problem` } });
    field.setAttribute("aria-describedby", `${id}-problem`);
    field.addEventListener("input", () => field.removeAttribute("aria-invalid"));
    const set = h(
      "button",
      { attrs: { type: "submit", "aria-label": S.setSetting(setting.key) } },
      S.set,
    );
    const reset =
      setting.source === "space"
        ? h(
            "button",
            {
              attrs: { type: "button", "aria-label": S.resetSetting(setting.key) },
              on: { click: () => void this.reset(setting.key, problem) },
            },
            S.reset,
          )
        : null;
    const form = h(
      "form",
      {
        class: "setting-form",
        attrs: { novalidate: "" },
        on: {
          submit: (event) => {
            event.preventDefault();
            void this.put(setting.key, kind, field, problem);
          },
        },
      },
      head,
      h("div", { class: "setting-edit" }, field, set, reset, source),
      problem,
    );
    row.append(form);
    return row;
  }

  private field(
    kind: Kind,
    id: string,
    value: SettingValue | null,
  ): HTMLInputElement | HTMLSelectElement {
    if (kind.type === "bool" || kind.type === "choice") {
      const options =
        kind.type === "bool"
          ? [
              ["true", S.on],
              ["false", S.off],
            ]
          : kind.choices.map((choice) => [choice, choice]);
      const select = h(
        "select",
        { attrs: { id } },
        ...options.map(([option, text]) => h("option", { attrs: { value: option ?? "" } }, text)),
      );
      select.value = String(value ?? "");
      return select;
    }
    const attrs: Record<string, string> = { id, autocomplete: "off", spellcheck: "false" };
    if (kind.type === "int") {
      attrs.inputmode = "numeric";
      attrs.type = "number";
      attrs.min = String(kind.min);
      if (kind.max !== null) attrs.max = String(kind.max);
    }
    const input = h("input", { attrs });
    input.value = value === null ? "" : String(value);
    return input;
  }

  private async put(
    key: string,
    kind: Kind,
    field: HTMLInputElement | HTMLSelectElement,
    problem: HTMLElement,
  ): Promise<void> {
    this.status.textContent = "";
    problem.textContent = "";
    const parsed = parseSetting(kind, field.value);
    if ("fault" in parsed) {
      field.setAttribute("aria-invalid", "true");
      field.focus();
      problem.textContent = parsed.fault;
      return;
    }
    try {
      const { setting } = await this.host.api.send<{ setting: Setting }>(
        "PUT",
        spacePath(this.spaceId, "settings", key),
        { value: parsed.value },
      );
      await this.reload();
      this.status.textContent = S.settingSet(key, shown(setting.value));
      this.focus(key);
    } catch (error) {
      field.setAttribute("aria-invalid", "true");
      refusal(this.host, error, problem);
    }
  }

  private async reset(key: string, problem: HTMLElement): Promise<void> {
    this.status.textContent = "";
    problem.textContent = "";
    try {
      const { setting } = await this.host.api.send<{ setting: Setting }>(
        "DELETE",
        spacePath(this.spaceId, "settings", key),
      );
      await this.reload();
      this.status.textContent = S.settingReset(
        key,
        shown(setting.value),
        S.sources[setting.source] ?? "",
      );
      this.focus(key);
    } catch (error) {
      refusal(this.host, error, problem);
    }
  }

  /** The row was drawn anew: focus goes back to its field. */
  private focus(key: string): void {
    const field = this.list.querySelector<HTMLElement>(`#${fieldId(key)}`);
    field?.focus();
  }
}

// ---- Deleting the space ------------------------------------------------------------------

export function deleteSpace(
  host: AdminHost,
  spaceId: string,
  title: string | null,
  deleted: (spaceId: string) => void,
): HTMLElement {
  const named = title ? `${title} (${spaceId})` : spaceId;
  const problem = h("p", { class: "error", attrs: { role: "alert" } });
  const place = h("div");
  const open: HTMLButtonElement = h(
    "button",
    {
      class: "danger",
      attrs: { type: "button" },
      on: {
        click: () =>
          place.replaceChildren(
            confirmation(S.deleteSpaceQuestion(named), open, async () => {
              problem.textContent = "";
              try {
                await host.api.send("DELETE", spacePath(spaceId));
                deleted(spaceId);
              } catch (error) {
                refusal(host, error, problem);
                open.focus();
              }
            }),
          ),
      },
    },
    S.deleteThisSpace,
  );
  return h(
    "section",
    { class: "space-delete", attrs: { "aria-labelledby": "space-delete-title" } },
    h("h3", { attrs: { id: "space-delete-title" } }, S.deleteSpace),
    h("p", { class: "muted help" }, S.deleteSpaceHelp),
    h("div", {}, open),
    place,
    problem,
  );
}

// ---- Pairings ----------------------------------------------------------------------------

/** The pairings waiting for an approver; null when the person isn't one (403). */
export async function pairings(host: AdminHost): Promise<HTMLElement | null> {
  const section = h(
    "section",
    { class: "pairings", attrs: { "aria-labelledby": "pairings-title" } },
    h("h3", { attrs: { id: "pairings-title" } }, S.pairings),
  );
  const list = h("ul", { class: "entries pairing-list" });
  const admittedList = h("ul", { class: "entries admitted-list" });
  const status = h("p", { class: "note", attrs: { role: "status" } });
  const problem = h("p", { class: "error", attrs: { role: "alert" } });

  const reload = async (): Promise<void> => {
    const answer = await host.api.get<{ pairings: Pairing[] }>("/pairing");
    list.replaceChildren(
      ...(answer.pairings.length === 0
        ? [h("li", { class: "muted" }, S.noPairings)]
        : answer.pairings.map(item)),
    );
    const admitted = await host.api.get<{ accounts: Admitted[] }>("/pairing/admitted");
    admittedList.replaceChildren(
      ...(admitted.accounts.length === 0
        ? [h("li", { class: "muted" }, S.noAdmitted)]
        : admitted.accounts.map(admittedItem)),
    );
  };
  const revoke = async (account: Admitted): Promise<void> => {
    status.textContent = "";
    problem.textContent = "";
    const name = account.name || account.account;
    try {
      await host.api.send("DELETE", `/pairing/admitted/${encodeURIComponent(account.account)}`);
      await reload();
      status.textContent = S.pairingRevoked(name);
      section.focus();
    } catch (error) {
      refusal(host, error, problem);
    }
  };
  const admittedItem = (account: Admitted): HTMLElement => {
    const name = account.name || account.account;
    return h(
      "li",
      { class: "entry admitted", attrs: { "data-account": account.account } },
      h(
        "div",
        { class: "entry-head" },
        h("span", { class: "person", attrs: { title: account.account } }, name),
        h(
          "span",
          { class: "entry-actions" },
          h(
            "button",
            {
              class: "danger",
              attrs: { type: "button", "aria-label": S.revokePerson(name) },
              on: { click: () => void revoke(account) },
            },
            S.revoke,
          ),
        ),
      ),
      h(
        "p",
        { class: "entry-meta muted" },
        S.admittedMeta(account.approvedBy, when(account.approvedAt)),
      ),
    );
  };
  const decide = async (pairing: Pairing, verb: "approve" | "deny"): Promise<void> => {
    status.textContent = "";
    problem.textContent = "";
    const name = pairing.name || accountOf(pairing);
    try {
      await host.api.send("POST", `/pairing/${encodeURIComponent(pairing.code)}/${verb}`);
      await reload();
      status.textContent = verb === "approve" ? S.pairingApproved(name) : S.pairingDenied(name);
      section.focus();
    } catch (error) {
      refusal(host, error, problem);
    }
  };
  const item = (pairing: Pairing): HTMLElement => {
    const name = pairing.name || accountOf(pairing);
    return h(
      "li",
      { class: "entry pairing", attrs: { "data-code": pairing.code } },
      h(
        "div",
        { class: "entry-head" },
        h("span", { class: "person", attrs: { title: accountOf(pairing) } }, name),
        h("span", { class: "muted" }, pairing.platform),
        h(
          "span",
          { class: "entry-actions" },
          h(
            "button",
            {
              class: "primary",
              attrs: { type: "button", "aria-label": S.approvePerson(name) },
              on: { click: () => void decide(pairing, "approve") },
            },
            S.approve,
          ),
          h(
            "button",
            {
              class: "danger",
              attrs: { type: "button", "aria-label": S.denyPerson(name) },
              on: { click: () => void decide(pairing, "deny") },
            },
            S.deny,
          ),
        ),
      ),
      h(
        "p",
        { class: "entry-meta muted" },
        S.pairingMeta(pairing.code, when(pairing.requestedAt), when(pairing.expiresAt)),
      ),
    );
  };

  section.setAttribute("tabindex", "-1");
  section.append(
    list,
    h("h4", { attrs: { id: "admitted-title" } }, S.admittedTitle),
    admittedList,
    status,
    problem,
  );
  try {
    await reload();
  } catch (error) {
    // Not an approver (403), or a server without pairing (404): the section isn't shown.
    if (error instanceof ApiError && [403, 404, 405].includes(error.status)) return null;
    // A sign-in gone stale is the whole tab's business; any other failure stays here.
    if (error instanceof ApiError && error.status === 401) throw error;
    problem.textContent = messageOf(error);
  }
  return section;
}
