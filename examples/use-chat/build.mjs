// Builds the example into dist/: index.html and one bundled app.js (esbuild, as ui/ is built).
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "dist");

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: { app: join(here, "src", "main.jsx") },
  outdir: out,
  bundle: true,
  format: "esm",
  minify: true,
  target: "es2022",
  jsx: "automatic",
  define: { "process.env.NODE_ENV": '"production"' },
  logLevel: "warning",
});
copyFileSync(join(here, "index.html"), join(out, "index.html"));
