// Which language the UI writes its own words in: the one the server chose for the person
// (GET /me answers it as Content-Language: saved, then Accept-Language, then the server's
// default), and before sign-in the browser's first language the server speaks, else English.

import { en, type Strings, strings } from "./strings";
import { de } from "./strings_de";
import { es } from "./strings_es";
import { fr } from "./strings_fr";
import { it } from "./strings_it";

export const LANGUAGES: Readonly<Record<string, Strings>> = { en, de, es, fr, it };

function supported(tag: string | null | undefined): string | null {
  const code = (tag ?? "").trim().toLowerCase().split("-")[0] ?? "";
  return Object.hasOwn(LANGUAGES, code) ? code : null;
}

/** The browser's first language among those the UI speaks, else English. */
export function browserLanguage(): string {
  for (const tag of navigator.languages ?? [navigator.language]) {
    const code = supported(tag);
    if (code) return code;
  }
  return "en";
}

/** Write the UI's words in `tag` (the browser's language when it is none the UI speaks). */
export function useLanguage(tag: string | null): string {
  const code = supported(tag) ?? browserLanguage();
  Object.assign(strings, LANGUAGES[code]);
  document.documentElement.lang = code;
  return code;
}
