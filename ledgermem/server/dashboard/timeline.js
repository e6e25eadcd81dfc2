// The activity timeline: events per day as stacked bars, drawn as plain SVG, with the
// same numbers in a table for screen readers and for copying.

import { get } from "./api.js";
import { field, fmt, h, replace, s, select, table } from "./dom.js";

/** Event kinds grouped into the series of the chart (first match wins). */
export const GROUPS = [
  { name: "Conversation", color: "#3b82f6", test: (kind) => kind.startsWith("turn.") && kind !== "turn.consolidated" },
  { name: "Knowledge changes", color: "#10b981", test: (kind) => ["memory.added", "memory.updated",
    "memory.superseded", "memory.invalidated", "memory.restored", "memory.deleted"].includes(kind) },
  { name: "Recalls", color: "#a855f7", test: (kind) => kind === "memory.recalled" },
  { name: "Tool calls", color: "#f59e0b", test: (kind) => kind === "tool.called" },
  { name: "LLM calls", color: "#ef4444", test: (kind) => kind === "llm.called" },
  { name: "Maintenance", color: "#64748b", test: (kind) => ["memory.decayed", "memory.pruned",
    "memory.compared", "turn.consolidated", "turns.extracted", "turns.queued"].includes(kind) },
  { name: "Other", color: "#94a3b8", test: () => true },
];

function groupOf(kind) {
  return GROUPS.find((group) => group.test(kind));
}

/** Every day from `days` ago to today (UTC, as the API counts them). */
function dayRange(days) {
  const out = [];
  const today = new Date();
  for (let back = days; back >= 0; back -= 1) {
    const day = new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate() - back));
    out.push(day.toISOString().slice(0, 10));
  }
  return out;
}

function niceMax(value) {
  if (value <= 5) return 5;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) {
    if (step * power >= value) return step * power;
  }
  return 10 * power;
}

/** The chart: `rows` are {day, kind, count}; returns an <svg>. */
export function timelineChart(rows, days) {
  const dates = dayRange(days);
  const known = new Set(dates);
  for (const row of rows) if (!known.has(row.day)) { known.add(row.day); dates.push(row.day); }
  dates.sort();
  const byDay = new Map(dates.map((day) => [day, new Map()]));
  for (const row of rows) {
    const groups = byDay.get(row.day);
    const group = groupOf(row.kind).name;
    groups.set(group, (groups.get(group) ?? 0) + row.count);
  }
  const totals = dates.map((day) => [...byDay.get(day).values()].reduce((a, b) => a + b, 0));
  const top = niceMax(Math.max(0, ...totals));
  const width = 900;
  const height = 260;
  const pad = { left: 48, right: 12, top: 12, bottom: 40 };
  const plotW = width - pad.left - pad.right;
  const plotH = height - pad.top - pad.bottom;
  const slot = plotW / dates.length;
  const barW = Math.max(1, slot * 0.75);
  const y = (value) => pad.top + plotH - (value / top) * plotH;
  const total = totals.reduce((a, b) => a + b, 0);
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img",
    id: "timeline-chart", "aria-label": `Events per day over the last ${days} days: ${total} in all` });
  for (let tick = 0; tick <= 4; tick += 1) {
    const value = (top / 4) * tick;
    svg.append(s("line", { x1: pad.left, x2: width - pad.right, y1: y(value), y2: y(value),
      class: "grid" }), s("text", { x: pad.left - 6, y: y(value) + 4, "text-anchor": "end",
      class: "axis" }, fmt.num(Math.round(value))));
  }
  const labelEvery = Math.max(1, Math.ceil(dates.length / 10));
  dates.forEach((day, index) => {
    const x = pad.left + index * slot + (slot - barW) / 2;
    let base = 0;
    for (const group of GROUPS) {
      const count = byDay.get(day).get(group.name) ?? 0;
      if (!count) continue;
      svg.append(s("rect", { x, width: barW, y: y(base + count), height: y(base) - y(base + count),
        fill: group.color, class: "day-bar", dataset: { day, group: group.name, count } },
      s("title", {}, `${day} · ${group.name}: ${count}`)));
      base += count;
    }
    if (index % labelEvery === 0) {
      svg.append(s("text", { x: x + barW / 2, y: height - pad.bottom + 16, "text-anchor": "middle",
        class: "axis" }, day.slice(5)));
    }
  });
  svg.append(s("line", { x1: pad.left, x2: width - pad.right, y1: y(0), y2: y(0), class: "axis-line" }));
  return svg;
}

function legend(rows) {
  const used = new Set(rows.map((row) => groupOf(row.kind).name));
  return h("ul", { class: "legend", "aria-label": "Legend" }, GROUPS.filter((g) => used.has(g.name))
    .map((group) => {
      const swatch = h("span", { class: "swatch", "aria-hidden": "true" });
      swatch.style.background = group.color;
      return h("li", {}, swatch, group.name);
    }));
}

let days = 30;

export async function timelineView(body) {
  const picker = select("days", [[7, "7 days"], [30, "30 days"], [90, "90 days"], [365, "a year"]], days);
  const out = h("div");
  picker.addEventListener("change", () => { days = Number(picker.value); draw(); });
  replace(body, h("div", { class: "toolbar" }, field("Period", picker)), out);
  async function draw() {
    const rows = await get("/v1/timeline", { days });
    const perKind = new Map();
    for (const row of rows) perKind.set(row.kind, (perKind.get(row.kind) ?? 0) + row.count);
    const kinds = [...perKind.entries()].sort((a, b) => b[1] - a[1]);
    replace(out, h("section", { class: "panel" }, h("h2", {}, "Events per day"),
      timelineChart(rows, days), legend(rows)),
    h("section", { class: "panel" }, h("h2", {}, "Events by kind"),
      table([{ label: "Kind", cell: ([kind]) => kind },
        { label: "Series", cell: ([kind]) => groupOf(kind).name },
        { label: "Events", class: "num", cell: ([, count]) => fmt.num(count) }],
      kinds, { empty: "No activity in this period." })));
  }
  await draw();
}
