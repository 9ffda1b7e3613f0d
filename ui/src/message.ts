// One assistant answer as it streams: reasoning, tool chips, text, pending choices, login links,
// the final text and errors. Deltas are batched to animation frames (one DOM write per frame,
// however many deltas arrived), and `final` replaces the streamed text: it is authoritative.

import type { ToolOutcome } from "./api";
import { append, button, h } from "./dom";
import { renderMarkdown } from "./markdown";
import { strings as S } from "./strings";

/** A chip's state in words, read when shown: the strings follow the person's language. */
function outcomeLabel(outcome: ToolOutcome): string {
  return { success: S.toolDone, failed: S.toolFailed, pending: S.toolWaiting }[outcome];
}

/** Text appended to a node at most once per animation frame. */
class FrameBuffer {
  private parts: string[] = [];
  private frame = 0;
  constructor(private readonly node: Text) {}

  push(chunk: string): void {
    this.parts.push(chunk);
    if (this.frame === 0) this.frame = requestAnimationFrame(() => this.flush());
  }

  flush(): void {
    if (this.frame !== 0) cancelAnimationFrame(this.frame);
    this.frame = 0;
    if (this.parts.length === 0) return;
    this.node.appendData(this.parts.join(""));
    this.parts = [];
  }
}

/** How a confirmation ended: taken (the action runs), cancelled (dropped unrun), or gone
 * (expired, or answered elsewhere). */
export type Settled = "taken" | "cancelled" | "gone";
export type ChoiceOutcome = Settled | null;
/** Answers with the choice at `index`, or cancels (`index` null); the note goes in `group`. */
export type ChoiceHandler = (index: number | null, group: HTMLElement) => Promise<ChoiceOutcome>;

/** What a taken choice's chip says: "confirmed", or which of several was chosen. */
export function takenSaying(choices: readonly { label: string }[], index: number): string {
  const label = choices[index]?.label || S.confirm;
  return choices.length > 1 ? S.toolChosen(label) : S.toolConfirmed;
}

export class AssistantMessage {
  readonly element: HTMLElement;
  private readonly activity: HTMLElement;
  private readonly body: HTMLElement;
  private readonly text: FrameBuffer;
  private readonly streamed: HTMLElement;
  private readonly extras: HTMLElement;
  private readonly reasoning = new Map<
    string,
    { details: HTMLDetailsElement; buffer: FrameBuffer }
  >();
  private readonly chips = new Map<string, HTMLElement>();
  private ownConfirmation = false;
  private choiceButtons: HTMLElement | null = null;

  constructor() {
    const textNode = document.createTextNode("");
    this.streamed = h("div", { class: "streamed" }, textNode);
    this.text = new FrameBuffer(textNode);
    this.activity = h("div", { class: "activity" });
    this.body = h("div", { class: "body" }, this.streamed);
    this.extras = h("div", { class: "extras" });
    this.element = h(
      "article",
      { class: "message assistant", attrs: { "aria-busy": "true", "aria-label": S.answer } },
      this.activity,
      this.body,
      this.extras,
    );
  }

  /** One reasoning block per answer: a later model round's reasoning continues it. */
  reasoningChunk(id: string, chunk: string): void {
    let block = this.reasoning.get(id);
    const first = this.reasoning.values().next();
    if (!block && !first.done) {
      block = first.value;
      this.reasoning.set(id, block);
      block.buffer.push("\n\n");
      block.details.open = true;
    }
    if (!block) {
      const node = document.createTextNode("");
      const details = h(
        "details",
        { class: "reasoning", attrs: { open: "" } },
        h("summary", {}, S.reasoning),
        h("div", { class: "reasoning-text" }, node),
      );
      block = { details, buffer: new FrameBuffer(node) };
      this.reasoning.set(id, block);
      this.activity.append(details);
    }
    block.buffer.push(chunk);
  }

  reasoningEnd(id: string, failed: boolean): void {
    const block = this.reasoning.get(id);
    if (!block) return;
    block.buffer.flush();
    block.details.open = false;
    block.details.classList.toggle("failed", failed);
  }

  toolStarted(toolCallId: string, label: string, detail: string): void {
    const chip = h(
      "span",
      { class: "chip running", attrs: { title: detail } },
      h("span", { class: "chip-state", attrs: { "aria-hidden": "true" } }),
      label,
      h("span", { class: "visually-hidden" }, ` (${S.toolRunning})`),
    );
    this.chips.set(toolCallId, chip);
    this.activity.append(chip);
  }

  toolFinished(toolCallId: string, outcome: ToolOutcome): void {
    const chip = this.chips.get(toolCallId);
    if (!chip) return;
    chip.className = `chip ${outcome}`;
    chip.dataset.outcome = outcome;
    const hidden = chip.querySelector(".visually-hidden");
    if (hidden) hidden.textContent = ` (${outcomeLabel(outcome)})`;
  }

  /** The waiting chips once the confirmation ended: their state says how, in words. */
  private settlePending(outcome: Settled, said: string): void {
    const state = { taken: "confirmed", cancelled: "cancelled", gone: "expired" }[outcome];
    for (const chip of this.chips.values()) {
      if (chip.dataset.outcome !== "pending") continue;
      chip.className = `chip ${{ taken: "success", cancelled: "cancelled", gone: "failed" }[outcome]}`;
      chip.dataset.outcome = state;
      chip.querySelector(".visually-hidden")?.remove();
      chip.append(h("span", { class: "chip-note" }, ` · ${said}`));
    }
  }

  /** The confirmation ended, here or elsewhere (the Pending tab): its buttons go, the chip
   * says how. `said` is a taken choice's words (see `takenSaying`). */
  settleConfirmation(outcome: Settled, said = S.toolConfirmed): void {
    for (const other of this.choiceButtons?.querySelectorAll("button") ?? []) {
      other.disabled = true;
    }
    const words = { taken: said, cancelled: S.toolCancelled, gone: S.toolExpired }[outcome];
    this.settlePending(outcome, words);
  }

  textChunk(chunk: string): void {
    this.text.push(chunk);
  }

  /** A staged action: one button per choice; a plain staging gets the UI's own "Confirm".
   * With `cancellable`, a Cancel too, unless a choice is the staging's own cancel. */
  pending(
    command: string,
    choices: readonly { label: string; kind?: string }[],
    onChoice: ChoiceHandler,
    cancellable = false,
  ): void {
    this.ownConfirmation = true;
    const group = h(
      "div",
      { class: "pending", attrs: { role: "group", "aria-label": S.waitingForConfirmation } },
      h("p", { class: "pending-command" }, command),
    );
    const buttons = h("div", { class: "choices" });
    this.choiceButtons = buttons;
    const press = (index: number | null) => () => {
      for (const other of buttons.querySelectorAll("button")) other.disabled = true;
      void onChoice(index, group).then((outcome) => {
        if (outcome) {
          this.settleConfirmation(outcome, index === null ? "" : takenSaying(choices, index));
        }
      });
    };
    choices.forEach((choice, index) => {
      buttons.append(button(choice.label || S.confirm, press(index)));
    });
    if (cancellable && !choices.some((choice) => choice.kind === "cancel")) {
      buttons.append(button(S.cancel, press(null)));
    }
    group.append(buttons);
    this.extras.append(group);
  }

  /** A confirmation left waiting by an earlier visit: its chip waits, nothing streams. */
  waiting(summary: string): void {
    this.toolStarted("waiting", S.confirmation, summary);
    this.toolFinished("waiting", "pending");
    this.element.setAttribute("aria-busy", "false");
  }

  /** A confirmation that ended before this visit: its summary and its chip, which says how. */
  ended(summary: string, outcome: Settled, said: string): void {
    this.waiting(summary);
    this.extras.append(h("p", { class: "settled-command" }, summary));
    this.settleConfirmation(outcome, said);
  }

  login(service: string, url: string): void {
    const link = h(
      "a",
      { attrs: { href: url, target: "_blank", rel: "noopener noreferrer" } },
      S.logInTo(service),
    );
    this.extras.append(
      h(
        "div",
        { class: "login", attrs: { role: "note" } },
        h("p", {}, link),
        h("p", { class: "warning" }, S.loginWarning),
      ),
    );
  }

  /** The authoritative text; `pendingNote` is hidden when this UI shows its own confirmation. */
  final(text: string, pendingNote?: string): void {
    this.text.flush();
    let shown = text;
    if (pendingNote && this.ownConfirmation && shown.startsWith(pendingNote)) {
      shown = shown.slice(pendingNote.length).trim();
    }
    this.body.replaceChildren(renderMarkdown(shown));
    this.body.dataset.final = "true";
    this.settle();
  }

  error(message: string, retry: (() => void) | null): void {
    this.text.flush();
    const box = h("div", { class: "error", attrs: { role: "alert" } }, h("p", {}, message));
    if (retry) box.append(button(S.retry, retry));
    this.extras.append(box);
    this.settle();
  }

  stopped(): void {
    this.text.flush();
    this.extras.append(h("p", { class: "stopped" }, S.stopped));
    this.settle();
  }

  note(text: string): void {
    append(this.extras, h("p", { class: "note" }, text));
  }

  isEmpty(): boolean {
    return this.body.textContent === "" && this.extras.childElementCount === 0;
  }

  private settle(): void {
    for (const block of this.reasoning.values()) block.buffer.flush();
    this.element.setAttribute("aria-busy", "false");
  }
}

export function userMessage(text: string): HTMLElement {
  return h(
    "article",
    { class: "message user", attrs: { "aria-label": S.you } },
    h("div", { class: "body" }, text),
  );
}

export function pastAnswer(text: string): HTMLElement {
  return h(
    "article",
    { class: "message assistant", attrs: { "aria-label": S.answer } },
    h("div", { class: "body", attrs: { "data-final": "true" } }, renderMarkdown(text)),
  );
}
