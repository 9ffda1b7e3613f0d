// Builds the UI into channel_http/ui/, the folder the server serves at /ui/ and the wheel ships.
// The output is deterministic, so `scripts/test` can rebuild it and fail when it drifts.
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "channel_http", "ui");

rmSync(out, { recursive: true, force: true });
mkdirSync(join(out, "assets"), { recursive: true });
await build({
  entryPoints: { app: join(here, "src", "main.ts"), style: join(here, "src", "style.css") },
  outdir: join(out, "assets"),
  bundle: true,
  splitting: true,
  format: "esm",
  minify: true,
  target: "es2022",
  chunkNames: "[name]-[hash]",
  legalComments: "linked",
  logLevel: "warning",
});
for (const file of ["index.html", "favicon.svg"]) copyFileSync(join(here, file), join(out, file));
