// Building the page without ever parsing stored text as HTML.
//
// Everything shown here is user data (memories, turns, tool errors), so text only ever
// reaches the page as text nodes or attribute values: `h()` has no innerHTML path.

const SVG_NS = "http://www.w3.org/2000/svg";

function append(parent, child) {
  if (child === null || child === undefined || child === false) return;
  if (Array.isArray(child)) {
    for (const each of child) append(parent, each);
  } else if (child instanceof Node) {
    parent.appendChild(child);
  } else {
    parent.appendChild(document.createTextNode(String(child)));
  }
}

function build(element, props, children) {
  for (const [name, value] of Object.entries(props ?? {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      element.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      element.setAttribute("class", Array.isArray(value) ? value.filter(Boolean).join(" ") : value);
    } else if (name === "dataset") {
      Object.assign(element.dataset, value);
    } else if (name === "value" && "value" in element) {
      element.value = String(value);
    } else if (name === "checked" || name === "selected" || name === "disabled") {
      element[name] = Boolean(value);
    } else {
      element.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(element, children);
  return element;
}

/** An HTML element: h("button", {class: "x", onclick: f}, "text", child, ...). */
export function h(tag, props, ...children) {
  return build(document.createElement(tag), props, children);
}

/** An SVG element, built the same way. */
export function s(tag, props, ...children) {
  return build(document.createElementNS(SVG_NS, tag), props, children);
}

/** Replace an element's children. */
export function replace(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

const numbers = new Intl.NumberFormat(undefined);

export const fmt = {
  num(value) {
    return value === null || value === undefined ? "–" : numbers.format(value);
  },
  pct(value) {
    return value === null || value === undefined ? "–" : `${(value * 100).toFixed(1)}%`;
  },
  ms(value) {
    if (value === null || value === undefined) return "–";
    return value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${value.toFixed(1)} ms`;
  },
  date(iso) {
    // Local time, to the minute, in one sortable form: 2026-05-12 09:30.
    if (!iso) return "–";
    const when = new Date(iso);
    if (Number.isNaN(when.getTime())) return iso;
    const two = (value) => String(value).padStart(2, "0");
    return `${when.getFullYear()}-${two(when.getMonth() + 1)}-${two(when.getDate())} ` +
      `${two(when.getHours())}:${two(when.getMinutes())}`;
  },
  day(iso) {
    return iso ? iso.slice(0, 10) : "–";
  },
  short(id) {
    return id ? id.slice(-8) : "–";
  },
  conf(value) {
    return value === null || value === undefined ? "–" : value.toFixed(2);
  },
};

/** A table: columns are {label, cell(row) -> node or text, class?}. */
export function table(columns, rows, { caption, empty = "Nothing to show.", rowProps } = {}) {
  const head = h("thead", {}, h("tr", {}, columns.map(
    (column) => h("th", { scope: "col", class: column.class }, column.label))));
  const body = h("tbody", {}, rows.map((row) => h("tr", rowProps ? rowProps(row) : {},
    columns.map((column) => h("td", { class: column.class, "data-label": column.label },
      column.cell(row))))));
  if (rows.length === 0) {
    body.append(h("tr", {}, h("td", { colspan: columns.length, class: "empty" }, empty)));
  }
  return h("div", { class: "table-wrap" },
    h("table", {}, caption ? h("caption", {}, caption) : null, head, body));
}

/** A labelled form control: label text, then the control. */
export function field(label, control, hint) {
  const id = control.id || `f-${Math.random().toString(36).slice(2, 10)}`;
  control.id = id;
  return h("div", { class: "field" }, h("label", { for: id }, label), control,
    hint ? h("small", { class: "hint" }, hint) : null);
}

/** A <select> with options given as [value, label] pairs (or plain values). */
export function select(name, options, value) {
  return h("select", { name }, options.map((option) => {
    const [optionValue, label] = Array.isArray(option) ? option : [option, option];
    return h("option", { value: optionValue, selected: String(optionValue) === String(value ?? "") },
      label);
  }));
}

/** A definition list from [term, value] pairs. */
export function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.map(([term, value]) => [h("dt", {}, term),
    h("dd", {}, value === null || value === undefined || value === "" ? "–" : value)]));
}

/** A small stat card. */
export function card(label, value, note) {
  return h("div", { class: "card" }, h("div", { class: "card-value" }, value),
    h("div", { class: "card-label" }, label), note ? h("div", { class: "card-note" }, note) : null);
}

/** An error as the user should see it: the API's message, its code and status. */
export function errorBox(error) {
  const status = error?.status ? `${error.status} ` : "";
  const code = error?.code ? `${status}${error.code}` : status.trim();
  return h("div", { class: "error", role: "alert" },
    h("strong", {}, "Error"), code ? h("span", { class: "code" }, ` (${code})`) : null, ": ",
    h("span", { class: "message" }, error?.message ?? String(error)));
}

/**
 * Run `work` with these buttons disabled, so a second click while it is in flight sends
 * nothing twice; they are enabled again when it ends (those already disabled stay so).
 */
export async function disableWhile(buttons, work) {
  const enabled = [...buttons].filter((button) => !button.disabled);
  for (const button of enabled) button.disabled = true;
  try {
    return await work();
  } finally {
    for (const button of enabled) button.disabled = false;
  }
}

/** A section with a heading. */
export function section(title, ...children) {
  return h("section", { class: "panel" }, h("h2", {}, title), children);
}
