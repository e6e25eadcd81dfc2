// The dashboard's shell: sign-in with an API key, the admin's user picker, the page
// navigation (#/page in the address bar) and the shared helpers every page gets.

import { ApiError, auth, get } from "./api.js";
import { errorBox, field, fmt, h, replace, table } from "./dom.js";
import { knowledgeView, openItem, resetKnowledge, showKnowledge } from "./knowledge.js";
import { reviewView } from "./review.js";
import { timelineView } from "./timeline.js";
import { facetsView, llmView, maintenanceView, overviewView, sessionsView, toolsView } from "./views.js";

const PAGES = [
  { name: "overview", title: "Overview", view: overviewView },
  { name: "knowledge", title: "Knowledge", view: knowledgeView },
  { name: "review", title: "Review queue", view: reviewView },
  { name: "entities", title: "Entities & contexts", view: facetsView },
  { name: "sessions", title: "Sessions", view: sessionsView },
  { name: "timeline", title: "Activity timeline", view: timelineView },
  { name: "tools", title: "Tools & errors", view: toolsView },
  { name: "llm", title: "LLM usage", view: llmView },
  { name: "maintenance", title: "Maintenance", view: maintenanceView },
];

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const who = document.getElementById("who");
const toastBox = document.getElementById("toast");
let me = null;
let users = [];
let rendering = 0;

function currentPage() {
  const name = window.location.hash.replace(/^#\/?/, "").split(/[/?]/)[0];
  return PAGES.find((page) => page.name === name) ?? PAGES[0];
}

let toastTimer = null;
function toast(message) {
  toastBox.textContent = message;
  toastBox.classList.add("shown");
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => toastBox.classList.remove("shown"), 4000);
}

function confirmDialog(message, action = "Confirm") {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = message;
  document.getElementById("confirm-ok").textContent = action;
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
    document.getElementById("confirm-ok").focus();
  });
}

function go(page) {
  const target = `#/${page}`;
  if (window.location.hash === target) render(); else window.location.hash = target;
}

/** What every page is given. */
const ctx = {
  toast,
  confirm: confirmDialog,
  go,
  get me() { return me; },
  showKnowledge(filters) { showKnowledge(filters); go("knowledge"); },
  openItem(id) { openItem(id); go("knowledge"); },
};

// sign-in ---------------------------------------------------------------------------
function signInForm(problem) {
  nav.hidden = true;
  replace(who);
  const input = h("input", { type: "password", name: "key", autocomplete: "off", required: true,
    spellcheck: "false", placeholder: "lm_…" });
  const form = h("form", { class: "signin panel", "aria-labelledby": "signin-title" },
    h("h1", { id: "signin-title" }, "Sign in"),
    h("p", {}, "Paste an API key. A user's key shows that user's memory; the admin key ",
      "lets you pick a user. `ledgermem serve` prints both when it starts. The key is kept ",
      "in this browser tab only."),
    field("API key", input),
    problem ? errorBox(problem) : null,
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Sign in")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    try {
      const found = await get("/v1/me", undefined, { key });
      auth.signIn(key, found.admin, found.admin ? null : found.user);
      window.history.replaceState(null, "", "#/overview");
      await start();
    } catch (error) {
      auth.signOut();
      signInForm(error);
    }
  });
  replace(main, form);
  input.focus();
}

async function start() {
  if (!auth.key) {
    signInForm(null);
    return;
  }
  try {
    me = await get("/v1/me", undefined, { asUser: false });
    users = me.admin ? await get("/v1/admin/users", undefined, { asUser: false }) : [];
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      auth.signOut();
      signInForm(error);
    } else {
      replace(main, errorBox(error));
    }
    return;
  }
  if (me.admin && auth.user && !users.some((user) => user.user === auth.user)) auth.actFor(null);
  header();
  await render();
}

// header and navigation -------------------------------------------------------------
function header() {
  const signOut = h("button", { type: "button", class: "ghost", onclick: () => {
    auth.signOut();
    me = null;
    resetKnowledge();
    window.location.hash = "";
    signInForm(null);
  } }, "Sign out");
  if (!me.admin) {
    replace(who, h("span", {}, "Signed in as ", h("strong", { id: "acting-user" }, me.user),
      me.agent ? ` (agent ${me.agent})` : ""), signOut);
    return;
  }
  const picker = h("select", { id: "user-picker", name: "user" },
    h("option", { value: "" }, "— pick a user —"),
    users.map((user) => h("option", { value: user.user, selected: user.user === auth.user },
      user.user)));
  picker.addEventListener("change", () => actFor(picker.value || null));
  replace(who, h("span", { class: "badge admin" }, "admin key"),
    h("label", { for: "user-picker" }, "Acting for"), picker, signOut);
}

function actFor(user) {
  auth.actFor(user);
  resetKnowledge();
  header();
  render();
}

function navigation(active) {
  nav.hidden = false;
  replace(nav, h("ul", {}, PAGES.map((page) => h("li", {}, h("a", {
    href: `#/${page.name}`, "aria-current": page === active ? "page" : null,
  }, page.title)))));
}

function userPicker() {
  const rows = users;
  return h("section", { class: "panel" }, h("h1", {}, "Pick a user"),
    h("p", {}, "The admin key acts for one user at a time: pick whose memory to see."),
    table([
      { label: "User", cell: (u) => h("button", { type: "button", class: "link",
        onclick: () => actFor(u.user) }, u.user) },
      { label: "Memories (all versions)", class: "num", cell: (u) => fmt.num(u.items) },
      { label: "Turns", class: "num", cell: (u) => fmt.num(u.turns) },
      { label: "Tool calls", class: "num", cell: (u) => fmt.num(u.tool_calls) },
      { label: "Events", class: "num", cell: (u) => fmt.num(u.events) },
      { label: "Live keys", class: "num", cell: (u) => fmt.num(u.live_keys) },
    ], rows, { empty: "No users yet." }));
}

/** Show the page named in the address bar. `focusTitle` (a navigation) moves the focus to
 * its heading as soon as the heading is shown, before the page's data arrives: moved any
 * later, it would take the focus from a filter the user has already started typing in. */
async function render({ focusTitle = false } = {}) {
  if (!me) return;
  const token = ++rendering;
  const page = currentPage();
  if (me.admin && !auth.user) {
    nav.hidden = true;
    replace(main, userPicker());
    return;
  }
  navigation(page);
  const body = h("div", { class: "page-body" });
  const heading = h("h1", { tabindex: "-1", id: "page-title" }, page.title);
  replace(main, heading, body);
  if (focusTitle) heading.focus({ preventScroll: true });
  document.title = `${page.title} · ledgermem`;
  try {
    await page.view(body, ctx);
  } catch (error) {
    if (token !== rendering) return;
    if (error instanceof ApiError && error.status === 401) {
      auth.signOut();
      signInForm(error);
      return;
    }
    body.append(errorBox(error));
  }
}

window.addEventListener("hashchange", () => render({ focusTitle: true }));
window.addEventListener("unhandledrejection", (event) => {
  const reason = event.reason;
  main.prepend(errorBox(reason instanceof Error ? reason : new Error(String(reason))));
});
document.getElementById("skip").addEventListener("click", (event) => {
  event.preventDefault();
  main.focus();
});

start();
