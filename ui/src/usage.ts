// The Usage panel: the tokens the model used for the person (GET /me/usage), by day and model,
// and, for an administrator, everyone's by person, space and model (GET /usage; the section is
// left out when the server refuses it with 403).

import { type Api, ApiError } from "./api";
import { h } from "./dom";
import { strings as S } from "./strings";

interface Sums {
  calls: number;
  input: number;
  output: number;
  cached: number;
}

interface UsageRow extends Sums {
  day?: string;
  person?: { id: string; name: string | null };
  spaceId?: string | null;
  model?: string;
}

interface UsageReport {
  period: string;
  from: string;
  to: string;
  rows: UsageRow[];
  total: Sums;
}

type Column = { label: string; cell: (row: UsageRow) => string };

const PERIODS = ["today", "7d", "30d", "month"];
const NUMBER = new Intl.NumberFormat();

function sums(row: Sums): string[] {
  return [row.input, row.output, row.cached, row.calls].map((n) => NUMBER.format(n));
}

function report(caption: string, answer: UsageReport, columns: Column[]): HTMLElement {
  if (answer.rows.length === 0) {
    return h("section", {}, h("h3", {}, caption), h("p", {}, S.noUsage));
  }
  const heads = [
    ...columns.map((c) => c.label),
    S.inputTokens,
    S.outputTokens,
    S.cachedTokens,
    S.calls,
  ];
  const cell = (text: string, numeric: boolean) =>
    h("td", numeric ? { class: "number" } : {}, text);
  const body = answer.rows.map((row) =>
    h(
      "tr",
      {},
      ...columns.map((c) => cell(c.cell(row), false)),
      ...sums(row).map((n) => cell(n, true)),
    ),
  );
  const total = h(
    "tr",
    { class: "total" },
    h("th", { attrs: { scope: "row", colspan: String(columns.length) } }, S.total),
    ...sums(answer.total).map((n) => cell(n, true)),
  );
  return h(
    "section",
    {},
    h("h3", {}, caption),
    h("p", { class: "note" }, S.usageRange(answer.from, answer.to)),
    h(
      "table",
      { class: "usage" },
      h(
        "thead",
        {},
        h("tr", {}, ...heads.map((label) => h("th", { attrs: { scope: "col" } }, label))),
      ),
      h("tbody", {}, ...body),
      h("tfoot", {}, total),
    ),
  );
}

export class UsageView {
  private period = "30d";

  constructor(private readonly api: Api) {}

  async render(panel: HTMLElement): Promise<void> {
    const reports = h("div", { attrs: { "aria-live": "polite" } });
    const select = h(
      "select",
      {
        attrs: { "aria-label": S.period },
        on: { change: () => void this.fill(reports, select.value) },
      },
      ...PERIODS.map((p) =>
        h(
          "option",
          { attrs: p === this.period ? { value: p, selected: "" } : { value: p } },
          S.periods[p] ?? p,
        ),
      ),
    );
    panel.append(h("h2", {}, S.usage), h("label", {}, `${S.period} `, select), reports);
    await this.fill(reports, this.period);
  }

  private async fill(reports: HTMLElement, period: string): Promise<void> {
    this.period = period;
    const mine = await this.api.get<UsageReport>("/me/usage", { period });
    const parts: HTMLElement[] = [
      report(S.yourUsage, mine, [
        { label: S.day, cell: (row) => row.day ?? "" },
        { label: S.model, cell: (row) => row.model ?? "" },
      ]),
    ];
    try {
      const everyone = await this.api.get<UsageReport>("/usage", { period });
      parts.push(
        report(S.everyonesUsage, everyone, [
          { label: S.person, cell: (row) => row.person?.name ?? row.person?.id ?? "" },
          { label: S.space, cell: (row) => row.spaceId ?? S.ownConversations },
          { label: S.model, cell: (row) => row.model ?? "" },
        ]),
      );
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 403)) throw error;
    }
    reports.replaceChildren(...parts);
  }
}
