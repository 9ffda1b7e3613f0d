// Model output is untrusted. It is rendered as Markdown with raw HTML shown as text, links only
// to http(s) and mailto, no images (no request leaves for a host the model chose), and the
// result passes through DOMPurify before it touches the page.

import DOMPurify from "dompurify";
import { Marked, type Tokens } from "marked";
import { h } from "./dom";

const SAFE_LINK = /^(https?:|mailto:)/i;

function escapeHtml(text: string): string {
  return text
    .replaceAll("&", "&amp;")
    .replaceAll("<", "&lt;")
    .replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;");
}

const marked = new Marked({
  gfm: true,
  breaks: true,
  renderer: {
    html(token: Tokens.HTML | Tokens.Tag): string {
      return escapeHtml(token.text);
    },
    image(token: Tokens.Image): string {
      return escapeHtml(token.text || token.href);
    },
    link(token: Tokens.Link): string {
      const label = this.parser.parseInline(token.tokens);
      if (!SAFE_LINK.test(token.href.trim())) return `${label} (${escapeHtml(token.href)})`;
      return `<a href="${escapeHtml(token.href)}">${label}</a>`;
    },
  },
});

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

/** The answer as a sanitized fragment, ready to append. */
export function renderMarkdown(text: string): DocumentFragment {
  const html = marked.parse(text, { async: false });
  const fragment = DOMPurify.sanitize(html, {
    RETURN_DOM_FRAGMENT: true,
    FORBID_TAGS: ["img", "style", "form", "input", "iframe", "svg", "math"],
    FORBID_ATTR: ["style"],
  });
  // A wide table scrolls sideways in a box of its own (reachable from the keyboard) rather
  // than widening the answer.
  for (const table of fragment.querySelectorAll("table")) {
    const box = h("div", { class: "table-scroll", attrs: { tabindex: "0" } });
    table.replaceWith(box);
    box.append(table);
  }
  return fragment;
}

/** Markdown as the words it shows, on one line: for a label, never for an answer. */
export function plainText(text: string): string {
  return (renderMarkdown(text).textContent ?? "").replace(/\s+/g, " ").trim();
}
