// The dashboard's smaller pages: overview, entities and contexts, sessions, tools and
// errors, LLM usage, maintenance. Each is `async (body, ctx)` and fills `body`.

import { auth, get, post } from "./api.js";
import { card, disableWhile, errorBox, facts, field, fmt, h, replace, section, table } from "./dom.js";

/** A time in a table cell, kept on one line. */
const when = (iso) => h("time", { datetime: iso }, fmt.date(iso));

// overview --------------------------------------------------------------------------
export async function overviewView(body, ctx) {
  const [stats, status, upcoming, usage] = await Promise.all([get("/v1/stats"),
    get("/v1/status"), get("/v1/memories/upcoming", { days: 7 }), get("/v1/llm-usage")]);
  const stat = (key, label, value, note) => {
    const element = card(label, fmt.num(value), note);
    element.dataset.stat = key;
    return element;
  };
  const categories = Object.entries(stats.by_category).sort((a, b) => b[1] - a[1]);
  const most = Math.max(1, ...categories.map(([, count]) => count));
  const bars = h("ul", { class: "bars", id: "by-category" }, categories.map(([name, count]) => {
    const bar = h("span", { class: `bar-fill cat-${name}`, "aria-hidden": "true" });
    bar.style.width = `${(100 * count) / most}%`;
    return h("li", { dataset: { category: name } },
      h("button", { type: "button", class: "link", onclick: () => ctx.showKnowledge({ category: name }) },
        name),
      h("span", { class: "bar" }, bar), h("span", { class: "num" }, fmt.num(count)));
  }));
  // What the LLM cost this user, from the ledger (also when no LLM is configured now).
  const llm = usage.length === 0 ? null : ["calls", "tokens_in", "tokens_out", "errors"].reduce(
    (sum, key) => ({ ...sum, [key]: usage.reduce((a, row) => a + row[key], 0) }), {});
  replace(body,
    h("div", { class: "cards", id: "stats" },
      stat("items", "Active memories", stats.items),
      stat("items_total", "All versions", stats.items_total, "superseded and invalidated included"),
      stat("sessions", "Sessions", stats.sessions),
      stat("turns", "Turns", stats.turns),
      stat("tool_calls", "Tool calls", stats.tool_calls),
      stat("events", "Ledger events", stats.events),
      stat("items_unembedded", "Waiting for a vector", stats.items_unembedded)),
    h("div", { class: "columns" },
      section("Active memories by category", categories.length ? bars : h("p", {}, "No memories yet.")),
      section("Mode", facts([["Mode", status.mode], ["Embedder", status.embedder ?? "none"],
        ["LLM", status.llm ?? "none (writes are verbatim, search still works)"],
        ["Extraction", `${fmt.num(status.extraction.pending)} pending · ${fmt.num(status.extraction.done)} done · ${fmt.num(status.extraction.skipped)} skipped · ${fmt.num(status.extraction.failed)} failed`],
        ["Embedding", `${fmt.num(status.embedding.pending)} waiting`],
        ...(llm ? [["LLM calls", `${fmt.num(llm.calls)} ${llm.calls === 1 ? "call" : "calls"} · ${fmt.num(llm.tokens_in)} tokens in · ${fmt.num(llm.tokens_out)} out · ${fmt.num(llm.errors)} errors`]] : []),
        ...Object.entries(status.skipped).map(([step, why]) => [`Skipped: ${step}`, why])]))),
    dueSoon(upcoming, ctx));
}

/** What is due within 7 days, and what is overdue (the API lists both, unreminded). */
function dueSoon(items, ctx) {
  const now = Date.now();
  const box = section("Due within 7 days or overdue", table([
    { label: "Memory", cell: (item) => h("button", { type: "button", class: "link",
      onclick: () => ctx.openItem(item.id) }, item.content) },
    { label: "Due", cell: (item) => [fmt.date(item.due_at),
      Date.parse(item.due_at) < now ? [" ", h("span", { class: "badge overdue" }, "overdue")] : null] },
    { label: "Category", cell: (item) => item.category },
  ], items, { empty: "Nothing due." }));
  box.id = "due-soon";
  return box;
}

// entities and contexts -------------------------------------------------------------------
function facetTable(label, rows, filter, ctx, id) {
  const search = h("input", { type: "search", name: `${id}-filter`, placeholder: "filter" });
  const holder = h("div");
  const draw = () => {
    const wanted = search.value.trim().toLowerCase();
    const shown = rows.filter((row) => row.value.toLowerCase().includes(wanted));
    replace(holder, table([
      { label, cell: (row) => h("button", { type: "button", class: "link",
        onclick: () => ctx.showKnowledge({ [filter]: row.value }) }, row.value) },
      { label: "Active memories", class: "num", cell: (row) => fmt.num(row.count) },
    ], shown, { empty: `No ${label.toLowerCase()} yet.` }));
  };
  search.addEventListener("input", draw);
  draw();
  const box = section(`${label} (${fmt.num(rows.length)})`, field(`Filter ${label.toLowerCase()}`, search), holder);
  box.id = id;
  return box;
}

export async function facetsView(body, ctx) {
  const [entities, contexts] = await Promise.all([get("/v1/entities"), get("/v1/contexts")]);
  replace(body, h("p", { class: "muted" }, "Pick one to see its memories in the knowledge browser."),
    h("div", { class: "columns" }, facetTable("Entities", entities, "entity", ctx, "entities"),
      facetTable("Contexts", contexts, "context", ctx, "contexts")));
}

// sessions --------------------------------------------------------------------------
const TURNS_SHOWN = 200;

async function showTurns(box, session, limit) {
  replace(box, h("p", {}, "Loading…"));
  try {
    const turns = await get("/v1/turns", { session_id: session.session_id, limit });
    const more = limit && session.turns > turns.length;
    replace(box, h("h2", { id: "turns-title", tabindex: "-1" }, `Turns of ${session.session_id}`),
      h("p", { class: "muted" }, more
        ? `The last ${fmt.num(turns.length)} of ${fmt.num(session.turns)} turns, oldest first. `
        : `${fmt.num(turns.length)} turns, oldest first. `,
      more ? h("button", { type: "button", class: "link", onclick: () => showTurns(box, session, undefined) },
        "Show all") : null),
      h("ol", { class: "turns", id: "turns" }, turns.map((turn) => h("li", {
        class: `turn role-${turn.role}`, dataset: { id: turn.id } },
      h("div", { class: "turn-head" }, h("span", { class: "badge" }, turn.role),
        turn.agent_id ? h("span", { class: "muted" }, ` agent ${turn.agent_id}`) : null,
        " ", h("time", { datetime: turn.ts }, fmt.date(turn.ts)),
        turn.consolidated_at ? h("span", { class: "muted" }, " · consolidated") : null),
      h("p", { class: "turn-content" }, turn.content)))));
    box.querySelector("#turns-title").focus({ preventScroll: true });
  } catch (error) {
    replace(box, errorBox(error));
  }
}

export async function sessionsView(body) {
  const sessions = await get("/v1/sessions");
  const turns = h("section", { class: "panel", id: "session-turns", "aria-live": "polite" },
    h("p", { class: "muted" }, sessions.length ? "Pick a session to read its turns." : ""));
  replace(body, h("div", { class: "columns wide-right" },
    section("Sessions", table([
      { label: "Session", cell: (row) => h("button", { type: "button", class: "link",
        onclick: () => showTurns(turns, row, TURNS_SHOWN) }, row.session_id) },
      { label: "Turns", class: "num", cell: (row) => fmt.num(row.turns) },
      { label: "Not consolidated", class: "num", cell: (row) => fmt.num(row.unconsolidated) },
      { label: "Last turn", cell: (row) => when(row.last_ts) },
      { label: "First turn", cell: (row) => when(row.first_ts) },
    ], sessions, { empty: "No conversations yet." })), turns));
}

// tools and errors --------------------------------------------------------------------
const CLAMPED = 200; // characters: a longer error shows its first lines, the rest on demand

/** A tool's error, in a column wide enough to read; a long one is cut to a few lines. */
function errorText(text) {
  if (text.length <= CLAMPED) return h("div", { class: "error-body" }, text);
  const body = h("div", { class: "error-body clamped", title: text }, text);
  const toggle = h("button", { type: "button", class: "link", "aria-expanded": "false",
    onclick: () => {
      const open = body.classList.toggle("open");
      toggle.setAttribute("aria-expanded", String(open));
      toggle.textContent = open ? "Show less" : "Show all";
    } }, "Show all");
  return [body, toggle];
}

export async function toolsView(body, ctx) {
  const [summary, failures, recent] = await Promise.all([get("/v1/tool-calls/summary"),
    get("/v1/tool-calls/errors", { limit: 200 }), get("/v1/errors/recent", { limit: 20 })]);
  const last = new Map();
  for (const call of failures) if (!last.has(call.name)) last.set(call.name, call);
  const missing = summary.filter((row) => row.failures > 0 && !last.has(row.name));
  const found = await Promise.all(missing.map((row) => get("/v1/tool-calls/errors",
    { name: row.name, limit: 1 })));
  for (const calls of found) if (calls.length) last.set(calls[0].name, calls[0]);
  replace(body,
    section("Tool summary", table([
      { label: "Tool", cell: (row) => row.name },
      { label: "Calls", class: "num", cell: (row) => fmt.num(row.calls) },
      { label: "Failures", class: "num", cell: (row) => fmt.num(row.failures) },
      { label: "Success rate", class: "num", cell: (row) => h("span", {
        class: row.success_rate < 0.9 ? "warn" : null }, fmt.pct(row.success_rate)) },
      { label: "Average duration", class: "num", cell: (row) => fmt.ms(row.avg_duration_ms) },
      { label: "Last call", cell: (row) => when(row.last_ts) },
      { label: "Last error", class: "error-text", cell: (row) => {
        const call = last.get(row.name);
        return call ? [errorText(call.error ?? "failed"), " ",
          h("small", { class: "muted" }, `(${fmt.date(call.ts)})`)] : "–";
      } },
    ], summary, { empty: "No tool calls logged.", rowProps: (row) => ({ dataset: { tool: row.name } }) })),
    section("Recent failed calls", table([
      { label: "When", cell: (call) => when(call.ts) },
      { label: "Tool", cell: (call) => call.name },
      { label: "Error", class: "error-text", cell: (call) => errorText(call.error ?? "–") },
      { label: "Arguments", cell: (call) => h("code", {}, JSON.stringify(call.arguments)) },
      { label: "Duration", class: "num", cell: (call) => fmt.ms(call.duration_ms) },
      { label: "Session", cell: (call) => call.session_id ?? "–" },
    ], recent.tool_calls, { empty: "No failed calls." })),
    section("Known errors (error memories)", table([
      { label: "Memory", class: "content", cell: (item) => h("button", { type: "button",
        class: "link clamped", title: item.content, onclick: () => ctx.openItem(item.id) },
      item.content) },
      { label: "Entity", cell: (item) => item.entity ?? "–" },
      { label: "Updated", cell: (item) => when(item.updated_at) },
    ], recent.items, { empty: "No error memories." })));
}

// LLM usage and cost ------------------------------------------------------------------
const PRICES = "ledgermem.prices";

function prices() {
  try {
    return JSON.parse(localStorage.getItem(PRICES) ?? "{}");
  } catch {
    return {};
  }
}

export async function llmView(body) {
  const [usage, status] = await Promise.all([get("/v1/llm-usage"), get("/v1/status")]);
  const models = [...new Set(usage.map((row) => row.model))];
  const price = prices();
  const holder = h("div");
  const cost = (row) => {
    const p = price[row.model];
    if (!p || (!p.in && !p.out)) return null;
    return (row.tokens_in / 1e6) * (p.in || 0) + (row.tokens_out / 1e6) * (p.out || 0);
  };
  const money = (value) => (value === null ? "–" : `$${value.toFixed(4)}`);
  const draw = () => {
    const sum = (key) => usage.reduce((a, row) => a + row[key], 0);
    const costs = usage.map(cost).filter((value) => value !== null);
    const totals = { purpose: "All", model: "", calls: sum("calls"), errors: sum("errors"),
      tokens_in: sum("tokens_in"), tokens_out: sum("tokens_out"), latency_ms: sum("latency_ms"),
      total: true };
    replace(holder, table([
      { label: "Purpose", cell: (row) => (row.total ? h("strong", {}, row.purpose) : row.purpose) },
      { label: "Model", cell: (row) => row.model },
      { label: "Calls", class: "num", cell: (row) => fmt.num(row.calls) },
      { label: "Errors", class: "num", cell: (row) => fmt.num(row.errors) },
      { label: "Tokens in", class: "num", cell: (row) => fmt.num(row.tokens_in) },
      { label: "Tokens out", class: "num", cell: (row) => fmt.num(row.tokens_out) },
      { label: "Mean latency", class: "num", cell: (row) => fmt.ms(row.calls ? row.latency_ms / row.calls : null) },
      { label: "Estimated cost", class: "num", cell: (row) => money(row.total
        ? (costs.length ? costs.reduce((a, b) => a + b, 0) : null) : cost(row)) },
    ], usage.length ? [...usage, totals] : [], { empty: "No LLM calls recorded for this user.",
      rowProps: (row) => ({ dataset: { purpose: row.purpose } }) }));
  };
  const priceForm = h("form", { class: "prices", "aria-label": "Prices per model" },
    models.map((model) => {
      const input = (side, label) => {
        const control = h("input", { type: "number", min: 0, step: "0.01", name: `${model}-${side}`,
          value: price[model]?.[side] ?? "" });
        control.addEventListener("input", () => {
          price[model] = { ...price[model], [side]: Number(control.value) || 0 };
          localStorage.setItem(PRICES, JSON.stringify(price));
          draw();
        });
        return field(`${model}: ${label}`, control);
      };
      return h("fieldset", {}, h("legend", {}, model), input("in", "$ per million input tokens"),
        input("out", "$ per million output tokens"));
    }));
  draw();
  replace(body, section("Usage by purpose and model", holder,
    h("p", { class: "muted" }, `LLM in use: ${status.llm ?? "none configured"}. Latency is the `,
      "model's answer time; costs are estimated from the prices below (kept in this browser).")),
  models.length ? section("Prices", priceForm) : null);
}

// maintenance -----------------------------------------------------------------------------
function lastRunKey() {
  return `ledgermem.maintenance.${auth.user ?? "me"}`;
}

function runResult(result) {
  const rows = [];
  if (result.decay) rows.push(["Decay", `${fmt.num(result.decay.decayed)} memories lost confidence`]);
  if (result.reconcile) {
    const r = result.reconcile;
    rows.push(["Reconcile", `${fmt.num(r.pairs_checked)} pairs checked: ${fmt.num(r.reinforced)} reinforced, ${fmt.num(r.contradicted)} contradicted, ${fmt.num(r.weakened)} weakened, ${fmt.num(r.neutral)} neutral`]);
  }
  if (result.consolidate) {
    rows.push(["Consolidate", `${fmt.num(result.consolidate.consolidated)} sessions consolidated, ${fmt.num(result.consolidate.extracted_items)} memories extracted`]);
  }
  if (result.prune) {
    const p = result.prune;
    rows.push(["Prune", `${fmt.num(p.turns)} turns, ${fmt.num(p.tool_calls)} tool calls, ${fmt.num(p.items)} memories dropped`]);
  }
  for (const [step, why] of Object.entries(result.skipped ?? {})) rows.push([`Skipped: ${step}`, why]);
  for (const [step, value] of Object.entries(result)) {
    if (!["decay", "reconcile", "consolidate", "prune", "skipped"].includes(step)) {
      rows.push([step, typeof value === "string" ? value : JSON.stringify(value)]);
    }
  }
  return facts(rows);
}

function describeEntry(entry, ctx) {
  const c = entry.counts;
  const d = entry.detail;
  const open = (id, label) => h("button", { type: "button", class: "link", onclick: () => ctx.openItem(id) }, label);
  switch (entry.step) {
    case "decay":
      return `${fmt.num(c.items)} ${c.items === 1 ? "memory" : "memories"} unused for a while: confidence × ${d.factor}`;
    case "prune": {
      const parts = [[c.turns, "turn"], [c.tool_calls, "tool call"], [c.items, "weak memory"]]
        .filter(([count]) => count > 0)
        .map(([count, what]) => `${fmt.num(count)} ${count === 1 ? what : what.replace(/y$/, "ie") + "s"}`);
      return `dropped ${parts.join(", ") || "nothing"}`;
    }
    case "reconcile":
      return [`compared `, open(d.older, "an older memory"), " with ", open(d.newer, "a newer one"),
        `: ${d.outcome}` + (d.similarity === null || d.similarity === undefined ? "" : ` (similarity ${d.similarity.toFixed(2)})`)];
    case "consolidate":
      return `session ${d.session_id ?? "–"}: ${fmt.num(c.turns)} turns distilled into ${fmt.num(c.items)} memories` +
        (c.skipped ? ` (${fmt.num(c.skipped)} left out)` : "");
    default:
      return JSON.stringify(entry.counts);
  }
}

/** What maintenance did, step by step, read back from the ledger. */
async function maintenanceHistory(ctx) {
  const entries = await get("/v1/dashboard/maintenance", { days: 90, limit: 200 });
  return section("What maintenance did (last 90 days)", table([
    { label: "When", cell: (entry) => h("time", { datetime: entry.ts }, fmt.date(entry.ts)) },
    { label: "Step", cell: (entry) => h("span", { class: "badge" }, entry.step) },
    { label: "What it did", cell: (entry) => describeEntry(entry, ctx) },
  ], entries, { empty: "Maintenance has changed nothing in the last 90 days.",
    rowProps: (entry) => ({ dataset: { step: entry.step } }) }));
}

export async function maintenanceView(body, ctx) {
  const status = await get("/v1/status");
  const lastBox = h("div", { id: "maintenance-result", "aria-live": "polite" });
  const showLast = () => {
    const kept = sessionStorage.getItem(lastRunKey());
    if (!kept) {
      replace(lastBox, h("p", { class: "muted" }, "Not run from this browser tab yet."));
      return;
    }
    const { at, result } = JSON.parse(kept);
    replace(lastBox, h("p", {}, `Last run from here: ${fmt.date(at)}`), runResult(result));
  };
  const run = (label, work) => h("button", { type: "button", onclick: (event) =>
    disableWhile([event.currentTarget], work).catch((error) => lastBox.prepend(errorBox(error))),
  }, label);
  showLast();
  const history = h("div", { id: "maintenance-history" });
  const showHistory = async () => replace(history, await maintenanceHistory(ctx));
  await showHistory();
  replace(body,
    h("div", { class: "columns" },
      section("Run", h("p", {}, "Decay unused memories, reconcile similar ones, consolidate idle ",
        "sessions and prune old rows: each step capped; steps that need an LLM are skipped without one."),
      h("div", { class: "actions" },
        run("Run maintenance now", async () => {
          const result = await post("/v1/maintenance/run");
          sessionStorage.setItem(lastRunKey(), JSON.stringify({ at: new Date().toISOString(), result }));
          showLast();
          await showHistory();
          ctx.toast("Maintenance done.");
        }),
        run("Requeue failed extraction", async () => {
          const { count } = await post("/v1/maintenance/requeue-extraction");
          ctx.toast(`${count} turns queued for extraction again.`);
        })), lastBox),
      section("Backlog", facts([
        ["Extraction pending", fmt.num(status.extraction.pending)],
        ["Extraction done", fmt.num(status.extraction.done)],
        ["Extraction skipped", fmt.num(status.extraction.skipped)],
        ["Extraction failed", fmt.num(status.extraction.failed)],
        ["Waiting for a vector", fmt.num(status.embedding.pending)],
        ...Object.entries(status.skipped).map(([step, why]) => [`Skipped: ${step}`, why])]))),
    history);
}
