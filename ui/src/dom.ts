// The one way this UI makes DOM: elements and text nodes, never HTML strings (model output is
// untrusted; the only HTML that reaches the page is markdown.ts's sanitized rendering).

type Child = Node | string | null | undefined | false;

export interface Props {
  class?: string;
  attrs?: Record<string, string>;
  on?: Partial<{ [K in keyof HTMLElementEventMap]: (event: HTMLElementEventMap[K]) => void }>;
}

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  if (props.class) element.className = props.class;
  for (const [name, value] of Object.entries(props.attrs ?? {})) element.setAttribute(name, value);
  for (const [name, listener] of Object.entries(props.on ?? {})) {
    element.addEventListener(name, listener as EventListener);
  }
  append(element, ...children);
  return element;
}

export function append(parent: Node, ...children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  }
}

export function clear(element: Element): void {
  element.replaceChildren();
}

/** A button with a visible label; `label` doubles as its accessible name. */
export function button(label: string, onClick: () => void, className = ""): HTMLButtonElement {
  return h(
    "button",
    { class: className, attrs: { type: "button" }, on: { click: onClick } },
    label,
  );
}
