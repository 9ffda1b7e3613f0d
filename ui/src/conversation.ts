// A conversation: its transcript (paged from /conversation as the reader scrolls), the composer,
// and the turns it runs. A turn is a POST /turn read as a stream; Stop aborts the fetch, which
// closes the connection, which cancels the model (the contract's rule). A message written while
// an answer streams waits in a queue, shown and cancellable, and is sent when the turn ends.

import {
  type Api,
  ApiError,
  type ConfirmAnswer,
  type PendingConfirmation,
  type SettledConfirmation,
  type TranscriptMessage,
  type TurnBody,
  type TurnEvent,
} from "./api";
import { button, h } from "./dom";
import {
  AssistantMessage,
  type ChoiceOutcome,
  pastAnswer,
  type Settled,
  takenSaying,
  userMessage,
} from "./message";
import { strings as S } from "./strings";

export interface ConversationHost {
  api: Api;
  announce(text: string): void;
  signOut(message: string): void;
  changed(): void;
  /** A confirmation of this conversation ended here (answered in the transcript, or found
   * expired): what else shows it (the Pending tab, other browser tabs) follows. */
  ended(confirmationId: string, outcome: Settled, said: string): void;
}

/** Messages asked for a request, pages read at most (the newest are what opening shows), and
 * messages shown at a time. */
const PAGE = 200;
const MAX_PAGES = 25;
const SHOWN = 50;

/** How an ended confirmation's chip settles, and what it says of a taken one. */
function endedAs(item: SettledConfirmation): [Settled, string] {
  switch (item.outcome) {
    case "cancelled":
      return ["cancelled", S.toolCancelled];
    case "expired":
      return ["gone", S.toolExpired];
    case "chosen":
      return ["taken", S.toolChosen(item.choice ?? "")];
    case "answered":
      return ["taken", S.toolAnswered];
    default:
      return ["taken", S.toolConfirmed];
  }
}

export class Conversation {
  readonly element: HTMLElement;
  private readonly history = h("div", { class: "history" });
  private readonly sentinel = h("div", { class: "sentinel", attrs: { "aria-hidden": "true" } });
  private readonly live = h("div", { class: "live" });
  private readonly queue = h("div", { class: "queue" });
  private readonly waiting: { text: string; element: HTMLElement }[] = [];
  private disposed = false;
  private readonly log: HTMLElement;
  private readonly input: HTMLTextAreaElement;
  private readonly sendButton: HTMLButtonElement;
  private readonly stopButton: HTMLButtonElement;
  private controller: AbortController | null = null;
  /** Messages read but not shown yet, oldest first: shown a page at a time, scrolling up. */
  private earlier: TranscriptMessage[] = [];
  private observer: IntersectionObserver | null = null;
  /** The answers showing a confirmation still open, by its id: the Pending tab settles them. */
  private readonly open = new Map<string, AssistantMessage>();
  private readonly expiries: number[] = [];

  constructor(
    private readonly host: ConversationHost,
    readonly id: string,
  ) {
    this.log = h(
      "div",
      {
        class: "log",
        attrs: { role: "log", "aria-live": "polite", "aria-label": S.conversation, tabindex: "0" },
      },
      this.sentinel,
      this.history,
      this.live,
      this.queue,
    );
    this.input = h("textarea", {
      attrs: {
        id: "composer",
        rows: "2",
        placeholder: S.composerPlaceholder,
        "aria-label": S.message,
      },
      on: {
        keydown: (event) => {
          if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
            event.preventDefault();
            this.submit();
          }
        },
      },
    });
    this.sendButton = button(S.send, () => this.submit(), "primary");
    this.stopButton = button(S.stop, () => this.stop(), "stop");
    this.stopButton.hidden = true;
    const form = h(
      "form",
      {
        class: "composer",
        on: {
          submit: (event) => {
            event.preventDefault();
            this.submit();
          },
        },
      },
      this.input,
      this.sendButton,
      this.stopButton,
    );
    this.element = h(
      "section",
      { class: "conversation", attrs: { "aria-label": S.chat } },
      this.log,
      form,
    );
  }

  focus(): void {
    this.input.focus();
  }

  /** The transcript, opened at its newest message; older ones are shown as the reader
   * scrolls up (the sentinel above them comes into view), keeping their place on screen. */
  async load(): Promise<void> {
    const read: TranscriptMessage[] = [];
    let offset: string | null = null;
    try {
      for (let page = 0; page < MAX_PAGES; page++) {
        const answer: { messages: TranscriptMessage[]; nextOffset: string | null } =
          await this.host.api.get("/conversation", { id: this.id, limit: PAGE, offset });
        read.push(...answer.messages);
        offset = answer.nextOffset;
        if (!offset || this.disposed) break;
      }
    } catch (error) {
      this.refused(error);
    }
    this.earlier = read;
    this.showEarlier();
    this.log.scrollTop = this.log.scrollHeight;
    this.observer = new IntersectionObserver((entries) => {
      if (entries.some((entry) => entry.isIntersecting) && this.earlier.length > 0) {
        this.showEarlier();
      }
    });
    this.observer.observe(this.sentinel);
    await this.restorePending();
  }

  /** The conversation's confirmations: those that ended, their chips saying how, then the
   * open ones with their buttons back: a reload loses the tokens, so they are answered by
   * id. Each open one settles when its time is up, as the server says it ended. */
  private async restorePending(): Promise<void> {
    let pending: PendingConfirmation[];
    let settled: SettledConfirmation[];
    try {
      ({ pending, settled = [] } = await this.host.api.get<{
        pending: PendingConfirmation[];
        settled: SettledConfirmation[];
      }>("/confirmations", { conversationId: this.id, settled: "true" }));
    } catch (error) {
      this.refused(error);
      return;
    }
    if (this.disposed) return;
    for (const item of settled) {
      const answer = new AssistantMessage();
      answer.ended(item.summary, ...endedAs(item));
      this.history.append(answer.element);
    }
    for (const item of pending) {
      const answer = new AssistantMessage();
      answer.waiting(item.summary);
      answer.pending(
        item.summary,
        item.choices,
        (index, group) =>
          this.answerWith(
            () =>
              this.host.api.answer(item.id, index === null ? { cancel: true } : { choice: index }),
            index === null ? "" : item.choices[index]?.label || S.confirmed,
            group,
            item.id,
            index === null ? "" : takenSaying(item.choices, index),
          ),
        true,
      );
      this.open.set(item.id, answer);
      this.history.append(answer.element);
      this.watchExpiry(item.id, item.expiresAt - this.host.api.serverNow());
    }
    if (pending.length + settled.length > 0) this.log.scrollTop = this.log.scrollHeight;
  }

  /** Once its time looks up, asks the server (whose clock decides, not the browser's)
   * whether the confirmation still waits: if not, its chip says how it ended. */
  private watchExpiry(confirmationId: string, after: number): void {
    const timer = window.setTimeout(async () => {
      if (this.disposed || !this.open.has(confirmationId)) return;
      try {
        const waiting = await this.check();
        if (waiting.has(confirmationId) && this.open.has(confirmationId)) {
          this.watchExpiry(confirmationId, 5_000);
        }
      } catch {
        this.watchExpiry(confirmationId, 30_000); // unreachable for now: ask again later
      }
    }, Math.max(0, after) + 500);
    this.expiries.push(timer);
  }

  /** Asks the server which of the open confirmations still wait (`settled=true`): each one
   * that doesn't settles as the server recorded its end (confirmed, chosen, answered or
   * cancelled elsewhere, or expired), and as expired when nothing is recorded; what else
   * shows it follows. The ids still waiting; throws when the server can't be asked. */
  async check(): Promise<Set<string>> {
    if (this.open.size === 0) return new Set();
    const { pending, settled = [] } = await this.host.api.get<{
      pending: PendingConfirmation[];
      settled: SettledConfirmation[];
    }>("/confirmations", { conversationId: this.id, settled: "true" });
    const waiting = new Set(pending.map((item) => item.id));
    for (const confirmationId of [...this.open.keys()]) {
      if (waiting.has(confirmationId)) continue;
      const record = settled.find((item) => item.id === confirmationId);
      const [outcome, said]: [Settled, string] = record ? endedAs(record) : ["gone", ""];
      this.close(confirmationId, outcome, said);
      this.host.ended(confirmationId, outcome, said);
    }
    return waiting;
  }

  /** A confirmation of this conversation ended elsewhere (the Pending tab, another tab of the
   * UI): its answer's buttons go and its chip follows; an action that hands back is heard
   * here. A `gone` one (no longer listed, how it ended unknown) is asked of the server. */
  settled(confirmationId: string, outcome: Settled, said?: string, resume = false): void {
    if (outcome === "gone" && this.open.has(confirmationId)) {
      void this.check().catch(() => this.close(confirmationId, "gone"));
      return;
    }
    this.close(confirmationId, outcome, said);
    if (resume) void this.run({ resume: true, conversationId: this.id }, null);
  }

  private close(confirmationId: string, outcome: Settled, said?: string): void {
    const answer = this.open.get(confirmationId);
    this.open.delete(confirmationId);
    answer?.settleConfirmation(outcome, said || undefined);
  }

  /** The newest of the messages not shown yet, above those shown, the reader's place kept. */
  private showEarlier(): void {
    const shown = this.earlier.splice(Math.max(0, this.earlier.length - SHOWN));
    const before = this.log.scrollHeight;
    this.history.prepend(
      ...shown.map((message) =>
        message.role === "user" ? userMessage(message.content) : pastAnswer(message.content),
      ),
    );
    this.log.scrollTop += this.log.scrollHeight - before;
  }

  dispose(): void {
    this.disposed = true;
    this.waiting.length = 0;
    this.observer?.disconnect();
    for (const timer of this.expiries) window.clearTimeout(timer);
    this.controller?.abort();
  }

  private submit(): void {
    const text = this.input.value.trim();
    if (!text) return;
    this.input.value = "";
    if (this.controller) this.enqueue(text);
    else void this.run({ text, conversationId: this.id }, text);
  }

  /** Holds a message written while an answer streams until the turn ends. */
  private enqueue(text: string): void {
    const element = h(
      "article",
      { class: "message user queued", attrs: { "aria-label": S.queuedMessage } },
      h("div", { class: "body" }, text),
    );
    const item = { text, element };
    const cancel = button(S.cancel, () => {
      const at = this.waiting.indexOf(item);
      if (at >= 0) this.waiting.splice(at, 1);
      element.remove();
      if (!this.input.value.trim()) this.input.value = text;
      this.host.announce(S.queuedCancelled);
      this.input.focus();
    });
    element.append(h("div", { class: "queued-note" }, h("span", {}, S.queuedNote), cancel));
    this.waiting.push(item);
    this.queue.append(element);
    this.host.announce(S.queuedNote);
    this.scrollToEnd();
  }

  /** Sends the oldest queued message, once the turn before it has ended. */
  private sendQueued(): void {
    if (this.disposed || this.controller) return;
    const next = this.waiting.shift();
    if (!next) return;
    next.element.remove();
    void this.run({ text: next.text, conversationId: this.id }, next.text);
  }

  stop(): void {
    this.controller?.abort();
  }

  /** Runs one turn into a new answer; `userText` is echoed first when the person wrote it. */
  async run(body: TurnBody, userText: string | null): Promise<void> {
    if (userText !== null) this.live.append(userMessage(userText));
    const answer = new AssistantMessage();
    this.live.append(answer.element);
    this.scrollToEnd();
    const controller = new AbortController();
    this.controller = controller;
    this.busy(true);
    let ended = false;
    let turnId: string | null = null;
    let lastEventId: string | null = null;
    let attempts = 0;
    let stream = this.host.api.turn(body, controller.signal);
    try {
      for (;;) {
        try {
          for await (const event of stream) {
            if (event.eventId) lastEventId = event.eventId;
            if (event.type === "turn") turnId = event.turnId;
            else ended = this.show(answer, event, body) || ended;
            this.scrollToEnd();
          }
        } catch (error) {
          // A dropped connection (not Stop, not a refusal) is rejoined below.
          if (controller.signal.aborted || error instanceof ApiError || !turnId) throw error;
        }
        if (ended) break;
        // The line dropped before the answer ended: rejoin the turn after the last event seen
        // (the server keeps it for HTTP_SURFACE_REJOIN_S), a few times, then give up.
        if (!turnId || !lastEventId || attempts >= 3) {
          answer.error(S.connectionClosed, () => void this.run(body, null));
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, 400 * 2 ** attempts));
        attempts += 1;
        stream = this.host.api.rejoin(turnId, lastEventId, controller.signal);
      }
    } catch (error) {
      const retry = () => void this.run(body, null);
      if (controller.signal.aborted) answer.stopped();
      else if (error instanceof ApiError && error.status === 404 && turnId) {
        answer.error(S.connectionLost, retry);
      } else if (error instanceof ApiError && error.status === 401) {
        this.host.signOut(error.message);
      } else answer.error(this.sentence(error), retry);
    } finally {
      this.controller = null;
      this.busy(false);
      if (body.opening && answer.isEmpty()) answer.element.remove();
      this.host.changed();
      // A token typed in the composer answers its confirmation: its chip says how.
      if (userText !== null && this.open.size > 0) void this.check().catch(() => undefined);
      this.sendQueued();
    }
  }

  /** Renders one event; true when it ends the turn. */
  private show(answer: AssistantMessage, event: TurnEvent, body: TurnBody): boolean {
    switch (event.type) {
      case "reasoning":
        answer.reasoningChunk(event.id, event.chunk);
        return false;
      case "reasoning_end":
        answer.reasoningEnd(event.id, event.failed);
        return false;
      case "tool":
        answer.toolStarted(event.toolCallId, event.label, event.detail);
        return false;
      case "tool_finish":
        answer.toolFinished(event.toolCallId, event.outcome);
        return false;
      case "text":
        answer.textChunk(event.chunk);
        return false;
      case "pending": {
        const { choices, confirmationId, expiresAt } = event;
        if (confirmationId) this.open.set(confirmationId, answer);
        // Settled once the server's clock passes it, as the server says it ended.
        if (confirmationId && expiresAt) {
          this.watchExpiry(confirmationId, Date.parse(expiresAt) - this.host.api.serverNow());
        }
        answer.pending(
          event.command,
          choices,
          (index, group) =>
            this.answerWith(
              () =>
                index === null && confirmationId
                  ? this.host.api.answer(confirmationId, { cancel: true })
                  : this.host.api.send<ConfirmAnswer>("POST", "/confirm", {
                      token: choices[index ?? 0]?.token,
                      conversationId: this.id,
                    }),
              index === null ? "" : choices[index]?.label || S.confirmed,
              group,
              confirmationId,
              index === null ? "" : takenSaying(choices, index),
            ),
          confirmationId !== undefined,
        );
        return false;
      }
      case "login":
        answer.login(event.service, event.url);
        return false;
      case "final":
        answer.final(event.text, event.pendingNote);
        this.host.announce(S.answerComplete);
        return true;
      case "error":
        answer.error(event.message, () => void this.run(body, null));
        return true;
      default:
        return false;
    }
  }

  /** Sends a confirmation's answer (a token to /confirm, or by id), notes the outcome under
   * its buttons and tells the host; `label` is the chosen choice's words, `said` its chip's. */
  private async answerWith(
    send: () => Promise<ConfirmAnswer>,
    label: string,
    group: HTMLElement,
    confirmationId?: string,
    said = "",
  ): Promise<ChoiceOutcome> {
    // Out of the open ones while it is sent: an expiry check meanwhile leaves it alone.
    const shown = confirmationId ? this.open.get(confirmationId) : undefined;
    if (confirmationId) this.open.delete(confirmationId);
    const outcome = await this.sent(send, label, group);
    if (outcome === "gone" && confirmationId && shown) {
      // Answered elsewhere, or expired: the chip says which, as the server recorded it.
      this.open.set(confirmationId, shown);
      return this.check().then(
        () => null,
        () => {
          this.open.delete(confirmationId);
          return "gone";
        },
      );
    }
    if (confirmationId && outcome) this.host.ended(confirmationId, outcome, said);
    else if (confirmationId && shown) this.open.set(confirmationId, shown);
    return outcome;
  }

  private async sent(
    send: () => Promise<ConfirmAnswer>,
    label: string,
    group: HTMLElement,
  ): Promise<ChoiceOutcome> {
    try {
      const answer = await send();
      if (!answer.resolved) {
        group.append(h("p", { class: "note" }, S.choiceGone));
        return "gone";
      }
      if (answer.cancelled) {
        group.append(h("p", { class: "note" }, answer.text ?? ""));
        return "cancelled";
      }
      if (answer.resume) {
        group.append(h("p", { class: "note" }, label));
        void this.run({ resume: true, conversationId: this.id }, null);
      } else {
        group.append(h("p", { class: "note" }, answer.text ?? ""));
      }
      return "taken";
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) {
        // By id: answered elsewhere, or expired; the server says which sentence.
        group.append(h("p", { class: "note" }, S.choiceGone));
        return "gone";
      }
      if (error instanceof ApiError && error.status === 401) this.host.signOut(error.message);
      else group.append(h("p", { class: "error", attrs: { role: "alert" } }, this.sentence(error)));
      return null;
    }
  }

  private sentence(error: unknown): string {
    if (error instanceof ApiError) {
      if (error.status === 429 && error.retryAfterS !== null) {
        return S.retryAfter(error.message, error.retryAfterS);
      }
      return error.message;
    }
    return S.unreachable;
  }

  private refused(error: unknown): void {
    if (error instanceof ApiError && error.status === 401) this.host.signOut(error.message);
    else
      this.history.append(
        h("p", { class: "error", attrs: { role: "alert" } }, this.sentence(error)),
      );
  }

  private busy(running: boolean): void {
    // Send stays: while an answer streams it queues the message.
    this.stopButton.hidden = !running;
    this.log.setAttribute("aria-busy", String(running));
    if (!running) this.input.focus();
  }

  private scrollToEnd(): void {
    const log = this.log;
    if (log.scrollHeight - log.scrollTop - log.clientHeight < 160 || this.controller) {
      log.scrollTop = log.scrollHeight;
    }
  }
}
