// A chat page on the AI SDK's useChat, talking to Mercury's /ui-stream.
//
// The server and the token come from the page's address: index.html#token=dev-…&api=http://…
// (api defaults to this page's own origin). Confirmations are the AI SDK's tool approvals:
// Yes and No answer them, and the chat sends the answer back by itself.
import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from "ai";
import { useState } from "react";
import { createRoot } from "react-dom/client";

const settings = new URLSearchParams(location.hash.slice(1));
const transport = new DefaultChatTransport({
  api: `${settings.get("api") ?? location.origin}/ui-stream`,
  headers: { authorization: `Bearer ${settings.get("token") ?? ""}` },
});

function Part({ part, answer }) {
  if (part.type === "text") return <p className="text">{part.text}</p>;
  if (part.type === "reasoning") return <p className="reasoning">{part.text}</p>;
  if (part.type === "data-login")
    return (
      <p className="login">
        <a href={part.data.url}>Sign in to {part.data.service}</a>
      </p>
    );
  if (!part.type.startsWith("tool-")) return null;
  return (
    <div className="tool" data-state={part.state}>
      <span>{part.title ?? part.type.slice(5)}</span>
      {part.state === "approval-requested" && (
        <>
          {" "}
          <button type="button" onClick={() => answer(part.approval.id, true)}>
            Yes
          </button>
          <button type="button" onClick={() => answer(part.approval.id, false)}>
            No
          </button>
        </>
      )}
      {part.state === "output-available" && <span> ✓</span>}
      {part.state === "output-denied" && <span> (not done)</span>}
      {part.state === "output-error" && <span> ({part.errorText})</span>}
    </div>
  );
}

function Chat() {
  const { messages, sendMessage, addToolApprovalResponse, status, error } = useChat({
    transport,
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  const [input, setInput] = useState("");
  const answer = (id, approved) => addToolApprovalResponse({ id, approved });
  return (
    <main data-status={status}>
      {messages.map((message) => (
        <section key={message.id} className={message.role}>
          {message.parts.map((part, index) => (
            <Part key={`${message.id}-${index}`} part={part} answer={answer} />
          ))}
        </section>
      ))}
      {error && <p role="alert">{error.message}</p>}
      <form
        onSubmit={(event) => {
          event.preventDefault();
          if (!input.trim()) return;
          sendMessage({ text: input });
          setInput("");
        }}
      >
        <input
          aria-label="Message"
          value={input}
          onChange={(event) => setInput(event.target.value)}
          disabled={status !== "ready"}
        />
        <button type="submit" disabled={status !== "ready"}>
          Send
        </button>
      </form>
    </main>
  );
}

createRoot(document.getElementById("root")).render(<Chat />);
