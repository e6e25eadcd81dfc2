// The review queue: findings proposed for a person to approve, edit or reject before
// anything becomes knowledge (GET /v1/proposals and its decisions). Deciding needs a key
// of the user, not one bound to an agent: the API refuses otherwise and its message is
// shown as it is.

import { get, post } from "./api.js";
import { disableWhile, errorBox, field, fmt, h, replace, select, table } from "./dom.js";

const CATEGORIES = ["fact", "preference", "error", "skill", "note", "reminder"];
const STATUSES = [["pending", "Pending"], ["decided", "Decided"], ["approved", "Approved"],
  ["edited", "Edited and approved"], ["rejected", "Rejected"], ["all", "All"]];
const SHOWN = 500; // the queue is read oldest first; a person decides a screenful at a time

let status = "pending";

const path = (id, rest = "") => `/v1/proposals/${encodeURIComponent(id)}${rest}`;

function badges(proposal) {
  return [h("span", { class: `badge cat-${proposal.category}` }, proposal.category),
    proposal.sensitive ? h("span", { class: "badge sensitive" }, "sensitive") : null];
}

function proposalCell(proposal) {
  return [h("div", { class: "proposal-content" }, proposal.content || "–"),
    proposal.why ? h("div", { class: "muted why" }, "Why: ", proposal.why) : null];
}

/** What a decided proposal became: its status, when, the item and the changes. */
function outcome(proposal, ctx) {
  const changed = Object.entries(proposal.changes ?? {});
  return [h("span", { class: `badge status-${proposal.status}` }, proposal.status), " ",
    h("time", { datetime: proposal.decided_at }, fmt.date(proposal.decided_at)),
    proposal.item_id ? h("div", {}, h("button", { type: "button", class: "link",
      onclick: () => ctx.openItem(proposal.item_id) }, "Open the memory")) : null,
    changed.length ? h("ul", { class: "changes" }, changed.map(([name, value]) =>
      h("li", {}, `${name} → ${value === null ? "none" : value}`))) : null];
}

/** The form that approves one proposal with the reviewer's changes, in its own row. */
function editRow(proposal, columns, decide) {
  const content = h("textarea", { name: "content", rows: 3, required: true, maxlength: 2000 });
  content.value = proposal.content;
  const category = select("category", CATEGORIES, proposal.category);
  const context = h("input", { name: "context", value: proposal.context, required: true });
  const entity = h("input", { name: "entity", value: proposal.entity ?? "", placeholder: "type:name" });
  const row = h("tr", { class: "edit-row", dataset: { editing: proposal.id } });
  const form = h("form", { class: "edit", "aria-label": "Edit the proposal, then approve it" },
    field("Content", content), h("div", { class: "edit-fields" }, field("Category", category),
      field("Context", context), field("Entity", entity)),
    h("div", { class: "actions" },
      h("button", { type: "submit", class: "primary" }, "Approve with changes"),
      h("button", { type: "button", class: "ghost", onclick: () => row.remove() }, "Cancel")));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const changes = {};
    if (content.value.trim() !== proposal.content) changes.content = content.value.trim();
    if (category.value !== proposal.category) changes.category = category.value;
    if (context.value.trim() && context.value.trim() !== proposal.context) {
      changes.context = context.value.trim();
    }
    // "" clears the entity (the API's way of saying "none").
    if (entity.value.trim() !== (proposal.entity ?? "")) changes.entity = entity.value.trim();
    decide(Object.keys(changes).length
      ? () => post(path(proposal.id, "/edit"), changes).then(() => "Approved with changes.")
      : () => post("/v1/proposals/approve", { ids: [proposal.id] }).then(() => "Approved."));
  });
  replace(row, h("td", { colspan: columns }, form));
  queueMicrotask(() => content.focus());
  return row;
}

export async function reviewView(body, ctx) {
  const filter = select("status", STATUSES, status);
  const problem = h("div", { "aria-live": "polite" });
  const summary = h("p", { class: "summary", id: "review-summary" });
  const bulk = h("div", { class: "actions" });
  const results = h("div", { id: "review-results" });
  filter.addEventListener("change", () => {
    status = filter.value;
    replace(problem);
    draw().catch((error) => replace(problem, errorBox(error)));
  });
  replace(body, h("p", { class: "muted" }, "Nothing proposed is remembered until it is " +
    "approved here. Rejecting erases the proposal's text from the ledger."),
  h("div", { class: "toolbar" }, field("Show", filter), bulk), problem,
  h("section", { class: "panel" }, summary, results));

  /** Run a decision, then show the queue as it now stands (or the API's error). Every
   * button of the queue is disabled meanwhile: a second click on Approve would ask to
   * approve what the first has just approved, and be refused. */
  async function decide(work) {
    replace(problem);
    try {
      await disableWhile(body.querySelectorAll("button"), async () => {
        const message = await work();
        if (message === null) return;
        ctx.toast(message);
        await draw();
      });
    } catch (error) {
      replace(problem, errorBox(error));
    }
  }

  const rejectOne = (proposal) => async () => {
    if (!await ctx.confirm("Reject this proposal? Nothing is remembered, and its text is " +
      "erased from the ledger. This cannot be undone.", "Reject")) return null;
    await post("/v1/proposals/reject", { ids: [proposal.id] });
    return "Rejected.";
  };

  function actionsFor(proposal, columns) {
    if (proposal.status !== "pending") return outcome(proposal, ctx);
    return h("div", { class: "actions row-actions" },
      h("button", { type: "button", class: "primary", onclick: () => decide(async () => {
        await post("/v1/proposals/approve", { ids: [proposal.id] });
        return "Approved.";
      }) }, "Approve"),
      h("button", { type: "button", onclick: (event) => {
        const row = event.target.closest("tr");
        if (row.nextElementSibling?.dataset.editing === proposal.id) return;
        row.after(editRow(proposal, columns, decide));
      } }, "Edit…"),
      h("button", { type: "button", class: "danger", onclick: () => decide(rejectOne(proposal)) },
        "Reject…"));
  }

  async function draw() {
    const shown = status;
    const proposals = await get("/v1/proposals", { status: shown, limit: SHOWN });
    if (shown !== status) return; // the filter changed while this was loading
    const columns = [
      { label: "Proposal", class: "content", cell: proposalCell },
      { label: "Category", cell: badges },
      { label: "Context", cell: (p) => p.context },
      { label: "Entity", cell: (p) => p.entity ?? "–" },
      { label: "Source", cell: (p) => [p.source, h("div", { class: "muted" }, `by ${p.proposer}`)] },
      { label: "Proposed", cell: (p) => h("time", { datetime: p.proposed_at }, fmt.date(p.proposed_at)) },
      { label: shown === "pending" ? "Decide" : "Status", cell: (p) => actionsFor(p, 7) },
    ];
    const label = STATUSES.find(([value]) => value === shown)[1].toLowerCase();
    replace(summary, proposals.length >= SHOWN
      ? `The first ${fmt.num(proposals.length)} proposals (${label}), oldest first.`
      : `${fmt.num(proposals.length)} ${proposals.length === 1 ? "proposal" : "proposals"} ` +
        `(${label}), oldest first.`);
    replace(results, table(columns, proposals, {
      caption: "Proposals",
      empty: shown === "pending" ? "Nothing waits for review." : "No proposals here.",
      rowProps: (p) => ({ dataset: { id: p.id, status: p.status } }),
    }));
    const pending = shown === "pending" && proposals.length > 0;
    replace(bulk, pending ? [
      h("button", { type: "button", onclick: () => decide(async () => {
        if (!await ctx.confirm("Approve every pending proposal? Each becomes a memory.",
          "Approve all")) return null;
        const done = await post("/v1/proposals/approve", { ids: "all" });
        return `Approved ${fmt.num(done.length)}.`;
      }) }, "Approve all…"),
      h("button", { type: "button", class: "danger", onclick: () => decide(async () => {
        if (!await ctx.confirm("Reject every pending proposal? Their text is erased from the " +
          "ledger. This cannot be undone.", "Reject all")) return null;
        const done = await post("/v1/proposals/reject", { ids: "all" });
        return `Rejected ${fmt.num(done.length)}.`;
      }) }, "Reject all…")] : null);
  }
  await draw();
}
