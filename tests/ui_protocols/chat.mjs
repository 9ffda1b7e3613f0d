// The AI SDK's Chat class (what useChat drives), headless in Node, against Mercury's /ui-stream.
//
//   node chat.mjs <base url> <token> <scenario> <chat id>
//
// Prints one JSON object: the chat's messages, its status and error, and what the scenario
// measured. tests/ui_protocols/test_ai_sdk_chat.py runs it against a real server.
import { Chat } from "@ai-sdk/react";
import {
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  readUIMessageStream,
} from "ai";

const [base, token, scenario, chatId, text] = process.argv.slice(2);
const headers = { authorization: `Bearer ${token}` };
const transport = () => new DefaultChatTransport({ api: `${base}/ui-stream`, headers });

function newChat() {
  return new Chat({
    id: chatId,
    transport: transport(),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
}

async function until(condition, what, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function approvalPart(chat) {
  const last = chat.messages.at(-1);
  return last?.parts.find((part) => part.state === "approval-requested");
}

function report(chat, extra = {}) {
  return {
    messages: chat.messages,
    status: chat.status,
    error: chat.error ? String(chat.error.message ?? chat.error) : null,
    ...extra,
  };
}

async function send() {
  const chat = newChat();
  await chat.sendMessage({ text });
  await until(() => chat.status === "ready" || chat.status === "error", "the answer");
  return report(chat);
}

async function approval(approved) {
  const chat = newChat();
  await chat.sendMessage({ text });
  await until(() => chat.status === "ready" && approvalPart(chat), "the approval request");
  const requested = structuredClone(chat.messages);
  const part = approvalPart(chat);
  await chat.addToolApprovalResponse({ id: part.approval.id, approved });
  // The re-post is automatic: wait until the tool part has its output and the chat is idle.
  await until(
    () =>
      chat.status === "ready" &&
      chat.messages.at(-1).parts.some(
        (p) => p.toolCallId === part.toolCallId && p.state.startsWith("output-"),
      ),
    "the continued message",
  );
  return report(chat, { requested });
}

async function reconnectIdle() {
  const stream = await transport().reconnectToStream({ chatId });
  return { stream: stream === null ? null : "a stream" };
}

async function reconnectRunning() {
  // One chat sends a slow turn; once its answer has started, a second client (another tab)
  // resumes the same chat and reads the replay from the start of the turn.
  const chat = newChat();
  const sending = chat.sendMessage({ text });
  await until(() => {
    const last = chat.messages.at(-1);
    return last?.role === "assistant" && last.parts.some((p) => p.type === "text" && p.text);
  }, "the first words");
  const stream = await transport().reconnectToStream({ chatId });
  let replayed = null;
  for await (const message of readUIMessageStream({ stream })) replayed = message;
  await sending;
  await until(() => chat.status === "ready", "the first client's answer");
  return report(chat, { replayed });
}

const scenarios = {
  send,
  approve: () => approval(true),
  deny: () => approval(false),
  "reconnect-idle": reconnectIdle,
  "reconnect-running": reconnectRunning,
};

try {
  const result = await scenarios[scenario]();
  process.stdout.write(JSON.stringify(result));
} catch (error) {
  process.stdout.write(JSON.stringify({ failed: String(error?.stack ?? error) }));
  process.exitCode = 1;
}
