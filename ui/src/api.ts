// The surface as the UI calls it: JSON routes with the `{ok:false,error}` envelope turned into
// ApiError, and POST /turn read as a stream of typed events (channel contract v6).

import { readSse } from "./sse";
import { strings as S } from "./strings";

export type ToolOutcome = "success" | "failed" | "pending";

export type TurnEvent = (
  | { type: "turn"; turnId: string }
  | { type: "reasoning"; chunk: string; id: string }
  | { type: "reasoning_end"; id: string; failed: boolean }
  | { type: "tool"; label: string; detail: string; toolCallId: string; name?: string }
  | { type: "tool_finish"; toolCallId: string; outcome: ToolOutcome }
  | { type: "text"; chunk: string }
  | {
      type: "pending";
      command: string;
      token: string;
      choices: Choice[];
      confirmationId?: string;
      /** When it expires unanswered, by the server's clock (ISO 8601, UTC). */
      expiresAt?: string;
    }
  | { type: "login"; service: string; url: string }
  | { type: "final"; text: string; pendingNote?: string }
  | { type: "error"; message: string }
) & { eventId?: string | null };

export interface Choice {
  token: string;
  label: string;
  kind?: "confirm" | "cancel";
}

/** A pending confirmation as GET /confirmations lists it: its choices carry no token; it is
 * answered by its id (POST /confirmations/{id}). */
export interface PendingConfirmation {
  id: string;
  conversationId: string | null;
  summary: string;
  expiresAt: number;
  choices: { label: string; kind?: "confirm" | "cancel" }[];
}

/** How a confirmation ended, as GET /confirmations?settled=true lists it (no token). */
export interface SettledConfirmation {
  id: string;
  conversationId: string | null;
  summary: string;
  outcome: "confirmed" | "chosen" | "answered" | "cancelled" | "expired";
  choice?: string;
  settledAt: number;
}

export interface TurnBody {
  text?: string;
  conversationId?: string;
  opening?: true;
  resume?: true;
}

export interface Me {
  name: string | null;
  /** The name the directory or the token gives (`name`: the one asked for in chat). */
  displayName?: string | null;
  /** Whether the person may answer requests for access (GET /pairing). */
  approver?: boolean;
  language?: string | null;
  timeZone?: string | null;
}

export interface ConversationSummary {
  conversationId: string;
  lastTimestamp: string;
  preview: string;
  /** The person's first question, on one line; empty while they have asked nothing. */
  title?: string;
}

export interface TranscriptMessage {
  role: "user" | "assistant";
  content: string;
  timestamp: string;
}

export interface ConfirmAnswer {
  resolved: boolean;
  text?: string;
  resume?: boolean;
  cancelled?: boolean;
}

/** How a pending confirmation is answered by its id: a choice's place, or a cancel. */
export type Answer = { choice: number } | { cancel: true };

const EVENT_NAMES = new Set([
  "turn",
  "reasoning",
  "reasoning_end",
  "tool",
  "tool_finish",
  "text",
  "pending",
  "login",
  "final",
  "error",
]);

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly retryAfterS: number | null = null,
  ) {
    super(message);
  }
}

export class Api {
  /** The language the server last said it speaks to this person (Content-Language). */
  spoken: string | null = null;
  /** How far the server's clock is ahead of the browser's, in ms, by its last Date header. */
  private skew = 0;

  constructor(
    readonly base: string,
    private readonly token: () => string | null,
  ) {}

  private headers(json: boolean): Headers {
    const headers = new Headers({ accept: "application/json" });
    const token = this.token();
    if (token) headers.set("authorization", `Bearer ${token}`);
    headers.set("x-time-zone", Intl.DateTimeFormat().resolvedOptions().timeZone);
    if (json) headers.set("content-type", "application/json");
    return headers;
  }

  private url(
    path: string,
    query: Record<string, string | number | null | undefined> = {},
  ): string {
    const url = new URL(this.base + path, window.location.href);
    for (const [name, value] of Object.entries(query)) {
      if (value !== null && value !== undefined) url.searchParams.set(name, String(value));
    }
    return url.toString();
  }

  /** The server's time now, as its responses' Date headers put it (to the second), else the
   * browser's: what an expiry the server sent is measured against. */
  serverNow(): number {
    return Date.now() + this.skew;
  }

  private read(response: Response): void {
    const date = Date.parse(response.headers.get("date") ?? "");
    // A Date header is cut to the second: half a second is its likeliest fraction.
    if (Number.isFinite(date)) this.skew = date + 500 - Date.now();
  }

  private async refusal(response: Response): Promise<ApiError> {
    let message = S.serverAnswered(response.status);
    try {
      const body = (await response.json()) as { error?: unknown };
      if (typeof body.error === "string" && body.error) message = body.error;
    } catch {
      // Not the envelope (a proxy's page, say): keep the status sentence.
    }
    const retry = Number.parseInt(response.headers.get("retry-after") ?? "", 10);
    return new ApiError(message, response.status, Number.isFinite(retry) ? retry : null);
  }

  async get<T>(path: string, query: Record<string, string | number | null | undefined> = {}) {
    const response = await fetch(this.url(path, query), { headers: this.headers(false) });
    this.read(response);
    if (!response.ok) throw await this.refusal(response);
    this.spoken = response.headers.get("content-language") ?? this.spoken;
    return (await response.json()) as T;
  }

  /** A request that changes something; a DELETE sends no body. */
  async send<T>(
    method: "POST" | "PATCH" | "PUT" | "DELETE",
    path: string,
    body?: unknown,
  ): Promise<T> {
    const json = body !== undefined;
    const response = await fetch(this.url(path), {
      method,
      headers: this.headers(json),
      ...(json ? { body: JSON.stringify(body) } : {}),
    });
    this.read(response);
    if (!response.ok) throw await this.refusal(response);
    return (await response.json()) as T;
  }

  /** Answers one's own pending confirmation by its id (a reloaded page holds no token). */
  answer(confirmationId: string, answer: Answer): Promise<ConfirmAnswer> {
    return this.send("POST", `/confirmations/${encodeURIComponent(confirmationId)}`, answer);
  }

  /** One turn; aborting `signal` closes the connection, which cancels the model. */
  async *turn(body: TurnBody, signal: AbortSignal): AsyncGenerator<TurnEvent> {
    const headers = this.headers(true);
    headers.set("accept", "text/event-stream");
    const response = await fetch(this.url("/turn"), {
      method: "POST",
      headers,
      body: JSON.stringify(body),
      signal,
    });
    yield* this.events(response);
  }

  /** The rest of a turn after `lastEventId` (GET /turn/events, when the server keeps turns). */
  async *rejoin(
    turnId: string,
    lastEventId: string,
    signal: AbortSignal,
  ): AsyncGenerator<TurnEvent> {
    const headers = this.headers(false);
    headers.set("accept", "text/event-stream");
    headers.set("last-event-id", lastEventId);
    const response = await fetch(this.url("/turn/events", { turnId }), { headers, signal });
    yield* this.events(response);
  }

  private async *events(response: Response): AsyncGenerator<TurnEvent> {
    this.read(response);
    if (!response.ok) throw await this.refusal(response);
    if (!response.body) throw new ApiError(S.noStream, response.status);
    for await (const message of readSse(response.body)) {
      if (!EVENT_NAMES.has(message.event)) continue; // events of later contracts are skipped
      yield { type: message.event, ...JSON.parse(message.data), eventId: message.id } as TurnEvent;
    }
  }
}
