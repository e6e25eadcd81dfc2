// The knowledge browser: filters, sort, search, server-side pages (offset + total from
// GET /v1/memories, so a user with tens of thousands of items pages as fast as one with
// ten), and an item's panel: edit, revise, forget, restore, history and lineage.

import { del, get, itemPath, patch, post } from "./api.js";
import { disableWhile, errorBox, facts, field, fmt, h, replace, select, table } from "./dom.js";

const CATEGORIES = ["fact", "preference", "error", "skill", "note", "reminder"];
const SOURCES = ["user", "tool", "llm_extract", "heuristic", "error_auto", "discovery",
  "consolidation"];
const SORTS = [["updated_at", "Last updated"], ["created_at", "Created"],
  ["confidence", "Confidence"], ["last_used_at", "Last used"], ["use_count", "Times used"],
  ["category", "Category"], ["due_at", "Due date"]];
const PAGE_SIZES = [25, 50, 100, 200];
const SEARCH_TOP = 200; // a search returns the best matches, ranked; paged here

const DEFAULTS = { q: "", category: "", context: "", entity: "", sensitive: "", source: "",
  inactive: false, sort: "updated_at", order: "desc", limit: 50, page: 1 };

let state = { ...DEFAULTS };
let selected = null; // the id whose panel is open
let view = null; // the elements of the mounted page
// The latest page load and item panel asked for: an answer to an older request (a slow
// one overtaken by the user's next filter or click) is dropped, not shown over it.
let loading = 0;
let showing = 0;

/** Forget every filter and the open item (a new user is being shown). */
export function resetKnowledge() {
  state = { ...DEFAULTS };
  selected = null;
}

/** Show the items matching these filters (the rest reset) on the next render. */
export function showKnowledge(filters) {
  state = { ...DEFAULTS, ...filters };
  selected = null;
}

/** Open this item's panel on the next render. */
export function openItem(id) {
  selected = id;
}

function status(item) {
  if (item.active) return "active";
  return item.superseded_by ? "superseded" : "invalidated";
}

function badges(item) {
  return [h("span", { class: `badge cat-${item.category}` }, item.category),
    item.active ? null : h("span", { class: "badge inactive" }, status(item)),
    item.sensitive ? h("span", { class: "badge sensitive" }, "sensitive") : null];
}

// the filter form ------------------------------------------------------------------
function filterForm(ctx, contexts, entities) {
  const form = h("form", { class: "filters", role: "search", "aria-label": "Filter memories" });
  const text = (name, props = {}) => h("input", { name, value: state[name], ...props });
  const contextList = h("datalist", { id: "context-options" },
    contexts.map((c) => h("option", { value: c.value }, `${c.value} (${c.count})`)));
  const entityList = h("datalist", { id: "entity-options" },
    entities.map((e) => h("option", { value: e.value }, `${e.value} (${e.count})`)));
  form.append(
    field("Search", text("q", { type: "search", placeholder: "words or meaning" }),
      "Ranked by relevance; clear it to sort and page through everything."),
    field("Category", select("category", [["", "any"], ...CATEGORIES], state.category)),
    field("Context", text("context", { list: "context-options", placeholder: "any" })),
    field("Entity", text("entity", { list: "entity-options", placeholder: "type:name" })),
    field("Sensitive", select("sensitive", [["", "any"], ["true", "sensitive only"],
      ["false", "not sensitive"]], state.sensitive)),
    field("Source", select("source", [["", "any"], ...SOURCES], state.source)),
    field("Versions", select("inactive", [["", "active only"],
      ["1", "with superseded and invalidated"]], state.inactive ? "1" : "")),
    field("Sort by", select("sort", SORTS, state.sort)),
    field("Order", select("order", [["desc", "descending"], ["asc", "ascending"]], state.order)),
    field("Per page", select("limit", PAGE_SIZES, state.limit)),
    contextList, entityList,
    h("div", { class: "actions" },
      h("button", { type: "submit", class: "primary" }, "Apply"),
      h("button", { type: "button", class: "ghost", onclick: () => {
        state = { ...DEFAULTS };
        ctx.go("knowledge");
      } }, "Reset")));
  const apply = () => {
    const data = new FormData(form);
    state = { ...state, q: data.get("q").trim(), category: data.get("category"),
      context: data.get("context").trim(), entity: data.get("entity").trim(),
      sensitive: data.get("sensitive"), source: data.get("source"),
      inactive: data.get("inactive") === "1", sort: data.get("sort"),
      order: data.get("order"), limit: Number(data.get("limit")), page: 1 };
    load(ctx);
  };
  form.addEventListener("submit", (event) => { event.preventDefault(); apply(); });
  form.addEventListener("change", (event) => {
    if (event.target.tagName === "SELECT") apply();
  });
  return form;
}

// loading a page -----------------------------------------------------------------
async function fetchPage() {
  const offset = (state.page - 1) * state.limit;
  const filters = { category: state.category || undefined, context: state.context || undefined,
    entity: state.entity || undefined, sensitive: state.sensitive || undefined,
    source: state.source || undefined };
  if (state.q) {
    const hits = await post("/v1/memories/search", { query: state.q, ...filters,
      sensitive: state.sensitive ? state.sensitive === "true" : undefined,
      source: undefined, include_superseded: state.inactive, top_k: SEARCH_TOP, touch: false });
    const items = hits.map((hit) => ({ ...hit.item, score: hit.score }))
      .filter((item) => !state.source || item.source === state.source);
    return { items: items.slice(offset, offset + state.limit), total: items.length, offset };
  }
  return get("/v1/memories", { ...filters, include_superseded: state.inactive || undefined,
    sort: state.sort, order: state.order, offset, limit: state.limit });
}

async function load(ctx) {
  if (!view) return;
  const { results } = view;
  const ticket = ++loading;
  results.setAttribute("aria-busy", "true");
  let page;
  try {
    page = await fetchPage();
  } catch (error) {
    if (ticket !== loading) return;
    replace(results, errorBox(error));
    results.removeAttribute("aria-busy");
    return;
  }
  if (ticket !== loading) return;
  const pages = Math.max(1, Math.ceil(page.total / state.limit));
  if (page.items.length === 0 && state.page > pages) {
    state.page = pages; // the last page emptied (items forgotten elsewhere): step back
    await load(ctx);
    return;
  }
  replace(results, h("div", { class: "list-head" }, summary(page, pages), pager(pages, ctx)),
    itemTable(page.items, ctx));
  results.removeAttribute("aria-busy");
}

function summary(page, pages) {
  const first = page.total === 0 ? 0 : page.offset + 1;
  const last = page.offset + page.items.length;
  const what = state.q ? `best matches for “${state.q}”` : "memories";
  return h("p", { class: "summary", id: "kb-summary", "aria-live": "polite" },
    h("span", { id: "kb-range" }, `${fmt.num(first)}–${fmt.num(last)}`), " of ",
    h("strong", { id: "kb-total" }, fmt.num(page.total)), ` ${what} · page `,
    h("span", { id: "kb-page" }, String(state.page)), " of ",
    h("span", { id: "kb-pages" }, String(pages)),
    state.q && page.total >= SEARCH_TOP ? ` (the top ${SEARCH_TOP} shown)` : "");
}

function itemTable(items, ctx) {
  return table([
    { label: "Memory", class: "content", cell: (item) => h("button", {
      type: "button", class: "link", title: "Open this memory",
      onclick: () => showItem(item.id, ctx) }, item.content) },
    { label: "Category", cell: (item) => badges(item) },
    { label: "Context", cell: (item) => item.context },
    { label: "Entity", cell: (item) => item.entity ?? "–" },
    { label: state.q ? "Score" : "Confidence", class: "num",
      cell: (item) => (state.q ? item.score.toFixed(3) : fmt.conf(item.confidence)) },
    { label: "Updated", cell: (item) => h("time", { datetime: item.updated_at },
      fmt.date(item.updated_at)) },
  ], items, {
    caption: "Memories",
    empty: "No memory matches these filters.",
    rowProps: (item) => ({ dataset: { id: item.id }, class: item.id === selected ? "selected" : null }),
  });
}

function pager(pages, ctx) {
  const goTo = (page) => {
    state.page = Math.min(Math.max(1, page), pages);
    load(ctx);
  };
  const input = h("input", { type: "number", min: 1, max: pages, value: state.page,
    name: "page", class: "page-input" });
  input.addEventListener("change", () => goTo(Number(input.value) || 1));
  const button = (label, page, disabled, name) => h("button", { type: "button", disabled,
    "aria-label": name, onclick: () => goTo(page) }, label);
  return h("nav", { class: "pager", "aria-label": "Pages" },
    button("« First", 1, state.page <= 1, "First page"),
    button("‹ Previous", state.page - 1, state.page <= 1, "Previous page"),
    field("Page", input), h("span", {}, ` of ${pages}`),
    button("Next ›", state.page + 1, state.page >= pages, "Next page"),
    button("Last »", pages, state.page >= pages, "Last page"));
}

// the item panel -------------------------------------------------------------------
async function showItem(id, ctx) {
  selected = id;
  if (!view) return;
  const { detail, results } = view;
  const ticket = ++showing;
  for (const row of results.querySelectorAll("tr[data-id]")) {
    row.classList.toggle("selected", row.dataset.id === id);
  }
  detail.hidden = false;
  replace(detail, h("p", {}, "Loading…"));
  let item;
  let history;
  try {
    [item, history] = await Promise.all([get(itemPath(id)), get(itemPath(id, "/history"))]);
  } catch (error) {
    if (ticket === showing) {
      replace(detail, h("h2", {}, "Memory"), errorBox(error), closeButton());
      reveal(detail);
    }
    return;
  }
  if (ticket !== showing) return;
  const lineage = h("div", { class: "lineage" });
  replace(detail,
    h("div", { class: "detail-head" }, h("h2", { id: "detail-title", tabindex: "-1" }, "Memory"),
      badges(item), closeButton()),
    h("p", { class: "item-content" }, item.content),
    actions(item, ctx),
    facts([["Id", h("code", {}, item.id)], ["Context", item.context], ["Entity", item.entity],
      ["Source", item.source], ["Confidence", fmt.conf(item.confidence)],
      ["Status", status(item)],
      ["Superseded by", item.superseded_by ? versionButton(item.superseded_by, ctx) : null],
      ["Created", fmt.date(item.created_at)], ["Updated", fmt.date(item.updated_at)],
      ["Last used", fmt.date(item.last_used_at)], ["Times used", fmt.num(item.use_count)],
      ["Due", item.due_at ? fmt.date(item.due_at) : null],
      ["Valid", `${fmt.date(item.valid_from)} → ${item.valid_to ? fmt.date(item.valid_to) : "now"}`],
      ["Metadata", Object.keys(item.metadata).length ? h("code", {},
        JSON.stringify(item.metadata)) : null]]),
    h("h3", {}, "Lineage"), lineage,
    h("h3", {}, "History"), historyList(history, item.id));
  detail.querySelector("#detail-title").focus({ preventScroll: true });
  reveal(detail);
  showLineage(lineage, history, item, ctx);
}

/** Bring the panel into view where it is drawn below the list (a narrow screen); beside
 * the list it is already in view, and the page stays where the user left it. */
function reveal(panel) {
  const top = panel.getBoundingClientRect().top;
  if (top < 0 || top > window.innerHeight / 2) panel.scrollIntoView({ block: "start" });
}

function closeButton() {
  return h("button", { type: "button", class: "ghost close", "aria-label": "Close the memory panel",
    onclick: () => {
      selected = null;
      view.detail.hidden = true;
      // Back to the memory's row, which a narrow screen has scrolled away from.
      view.results.querySelector("tr.selected button")?.focus();
      for (const row of view.results.querySelectorAll("tr.selected")) row.classList.remove("selected");
    } }, "✕");
}

function versionButton(id, ctx) {
  return h("button", { type: "button", class: "link", onclick: () => showItem(id, ctx) },
    h("code", {}, fmt.short(id)));
}

function actions(item, ctx) {
  const box = h("div", { class: "actions" });
  const refresh = async (id, message) => {
    ctx.toast(message);
    await load(ctx);
    await showItem(id, ctx);
  };
  const attempt = (work) => async () => {
    try {
      await disableWhile(box.querySelectorAll("button"), work);
    } catch (error) {
      box.after(errorBox(error));
    }
  };
  box.append(h("button", { type: "button", class: "primary", onclick: () => {
    box.replaceWith(editForm(item, ctx, refresh));
  } }, "Edit"));
  if (!item.active) {
    box.append(h("button", { type: "button", onclick: attempt(async () => {
      const restored = await post(itemPath(item.id, "/restore"), { reason: "restored from the dashboard" });
      await refresh(restored.id, "Restored: this version is active again.");
    }) }, "Restore"));
  } else {
    box.append(h("button", { type: "button", onclick: attempt(async () => {
      if (!await ctx.confirm("Mark this memory as no longer true? It stays in history and can be restored.", "Invalidate")) return;
      await post(itemPath(item.id, "/invalidate"), { reason: "invalidated from the dashboard" });
      await refresh(item.id, "Invalidated.");
    }) }, "Invalidate"));
  }
  box.append(h("button", { type: "button", class: "danger", onclick: attempt(async () => {
    if (!await ctx.confirm("Forget this memory? Its text is erased everywhere, the ledger " +
      "included. This cannot be undone.", "Forget")) return;
    await del(itemPath(item.id));
    selected = null;
    view.detail.hidden = true;
    ctx.toast("Forgotten.");
    await load(ctx);
  }) }, "Forget…"));
  return box;
}

function editForm(item, ctx, refresh) {
  const content = h("textarea", { name: "content", rows: 4, required: true, maxlength: 2000 });
  content.value = item.content;
  const controls = {
    content,
    category: select("category", CATEGORIES, item.category),
    context: h("input", { name: "context", value: item.context, required: true }),
    entity: h("input", { name: "entity", value: item.entity ?? "", placeholder: "type:name" }),
    confidence: h("input", { name: "confidence", type: "number", min: 0, max: 1, step: 0.01,
      value: item.confidence.toFixed(2), placeholder: "unchanged" }),
    sensitive: h("input", { name: "sensitive", type: "checkbox", checked: item.sensitive }),
    revise: h("input", { name: "revise", type: "checkbox" }),
  };
  const problem = h("div");
  const form = h("form", { class: "edit", "aria-label": "Edit the memory" },
    field("Content", controls.content), field("Category", controls.category),
    field("Context", controls.context), field("Entity", controls.entity),
    field("Confidence", controls.confidence),
    h("div", { class: "checks" },
      h("label", {}, controls.sensitive, " Sensitive"),
      h("label", {}, controls.revise, " Keep the old version (a new version supersedes it)")),
    problem,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Save"),
      h("button", { type: "button", class: "ghost", onclick: () => showItem(item.id, ctx) },
        "Cancel")));
  const save = async (changes) => {
    if (controls.revise.checked) {
      // Fields left out are the old version's; a null entity clears it.
      const revised = await post(itemPath(item.id, "/revise"), { content: content.value,
        ...changes, reason: "revised from the dashboard" });
      await refresh(revised.id, "Saved as a new version; the old one is kept in its lineage.");
    } else if (Object.keys(changes).length === 0) {
      await showItem(item.id, ctx);
    } else {
      await patch(itemPath(item.id), changes);
      await refresh(item.id, "Saved.");
    }
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const changes = {};
    if (content.value !== item.content) changes.content = content.value;
    if (controls.category.value !== item.category) changes.category = controls.category.value;
    const context = controls.context.value.trim();
    if (context && context !== item.context) changes.context = context;
    const entity = controls.entity.value.trim() || null;
    if (entity !== item.entity) changes.entity = entity;
    if (controls.sensitive.checked !== item.sensitive) changes.sensitive = controls.sensitive.checked;
    // An empty field (Number("") is 0) leaves the confidence as it is.
    const confidence = controls.confidence.valueAsNumber;
    if (!Number.isNaN(confidence) && Math.abs(confidence - item.confidence) > 0.004) {
      changes.confidence = confidence;
    }
    try {
      // Save is disabled until the answer: a second click would revise the version the
      // first one has just superseded, and be refused.
      await disableWhile(form.querySelectorAll("button"), () => save(changes));
    } catch (error) {
      replace(problem, errorBox(error));
    }
  });
  queueMicrotask(() => content.focus());
  return form;
}

// history and lineage ---------------------------------------------------------------
const KIND_LABELS = {
  "memory.added": "added", "memory.updated": "edited", "memory.superseded": "superseded",
  "memory.invalidated": "invalidated", "memory.restored": "restored", "memory.deleted": "forgotten",
  "memory.recalled": "recalled", "memory.decayed": "confidence decayed", "memory.pruned": "pruned",
};

function describe(event) {
  const payload = event.payload ?? {};
  const parts = [];
  if (event.kind === "memory.added" && payload.item) parts.push(`“${payload.item.content}”`);
  if (payload.changes) {
    for (const [name, value] of Object.entries(payload.changes)) {
      if (name === "updated_at") continue;
      let shown = typeof value === "string" ? value : JSON.stringify(value);
      if (name === "superseded_by" && value) shown = fmt.short(value);
      else if (/(_at|_to|_from)$/.test(name) && value) shown = fmt.date(value);
      parts.push(`${name} → ${shown}`);
    }
  }
  if (payload.factor !== undefined) parts.push(`× ${payload.factor}`);
  if (payload.by) parts.push(`by ${fmt.short(payload.by)}`);
  if (payload.reason) parts.push(`reason: ${payload.reason}`);
  if (payload.source) parts.push(`source: ${payload.source}`);
  return parts.join(" · ");
}

function historyList(events, id) {
  if (events.length === 0) return h("p", {}, "No history.");
  return h("ol", { class: "history", id: "item-history" }, events.map((event) => h("li", {
    dataset: { kind: event.kind } },
  h("time", { datetime: event.ts }, fmt.date(event.ts)), " ",
  h("span", { class: "badge" }, KIND_LABELS[event.kind] ?? event.kind),
  event.subject_id && event.subject_id !== id
    ? h("span", { class: "muted" }, ` (version ${fmt.short(event.subject_id)})`) : null,
  " ", h("span", { class: "what" }, describe(event)))));
}

async function showLineage(box, history, item, ctx) {
  const ids = [...new Set(history.map((event) => event.subject_id).filter(Boolean))];
  if (!ids.includes(item.id)) ids.push(item.id);
  if (ids.length === 1) {
    replace(box, h("p", { class: "muted" }, "One version: never revised."));
    return;
  }
  const found = await Promise.allSettled(ids.map((id) => get(itemPath(id))));
  replace(box, h("ol", { class: "versions", id: "item-lineage" }, ids.map((id, index) => {
    const version = found[index].status === "fulfilled" ? found[index].value : null;
    return h("li", { "aria-current": id === item.id ? "true" : null },
      id === item.id ? h("strong", {}, `${fmt.short(id)} (this one)`) : versionButton(id, ctx),
      " ", version ? h("span", { class: "badge" }, status(version)) : h("span", { class: "badge" },
        "forgotten"),
      " ", version ? version.content : "");
  })));
}

// the page ------------------------------------------------------------------------
export async function knowledgeView(body, ctx) {
  const [contexts, entities] = await Promise.all([get("/v1/contexts"), get("/v1/entities")]);
  // A later render replaced this one while it waited (the user went elsewhere and came
  // back): the page on screen is that render's, and this one must not take it over.
  if (!body.isConnected) return;
  const results = h("div", { class: "results", id: "kb-results" });
  const detail = h("aside", { class: "detail panel", id: "item-detail", hidden: true,
    "aria-label": "Memory details" });
  view = { results, detail };
  replace(body, filterForm(ctx, contexts, entities),
    h("div", { class: "browser" }, h("div", { class: "list panel" }, results), detail));
  await load(ctx);
  if (selected) await showItem(selected, ctx);
}
