// Carico dashboard: polls the extender's read-only JSON API and redraws. No framework, no
// external assets: a few DOM helpers and an inline SVG chart are all it needs.
"use strict";

const REFRESH_MS = 1500;
const REPACK_MS = 3000;
const CHART_MAX_SECONDS = 600; // the extender keeps ten minutes
const CHART_MIN_SECONDS = 60;
let policy = { stale_policy: "fail-open", stale_after_seconds: null };
let staleNodes = new Set();
let refreshes = 0;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : String(c));
  return node;
}

function num(v, digits = 2) {
  return v === null || v === undefined || Number.isNaN(v) ? "–" : Number(v).toFixed(digits);
}

async function getJSON(path) {
  const reply = await fetch(path, { cache: "no-store" });
  if (!reply.ok) {
    const err = new Error(`${path}: HTTP ${reply.status}`);
    err.status = reply.status;
    try { err.body = await reply.json(); } catch (_) { /* not JSON */ }
    throw err;
  }
  return reply.json();
}

function badge(text, kind, title) {
  const b = el("span", { class: `badge ${kind || ""}` }, text);
  if (title) b.title = title;
  return b;
}

function flags(n) {
  const out = [];
  if (!n.reported) {
    out.push(badge("NO REPORT", "bad", "bound pods are reserved here but no agent has reported"));
  } else if (n.stale) {
    const how = policy.stale_policy === "fail-open"
      ? "fail-open: passes the filter with score 0" : "fail-closed: fails the filter";
    out.push(badge(`STALE · ${how}`, "bad", `no report for ≥ ${policy.stale_after_seconds} s`));
  }
  const h = n.health || {};
  if (n.reported) {
    if (h.churn_hold) out.push(badge("churn hold", "warn", "estimation halted after pod events"));
    if (!h.psi_available) out.push(badge("no PSI", "warn", "the kernel reports no pressure"));
    if (h.samples_missing) out.push(badge(`${h.samples_missing} samples missing`, "warn"));
    out.push(h.global_model ? badge("global model", "ok", "merged the fleet's model")
      : badge("local model only", "warn", "no recent global model from the aggregator"));
  }
  return out;
}

function renderNodes(nodes) {
  const body = document.querySelector("#nodes tbody");
  const rows = nodes.map((n) => {
    // A node with per-class data is decided by its classes' fits (next table); its avail, the
    // one-cost estimate, is shown for reference only, dimmed, with a note on hover.
    const byClass = n.decided_by === "class";
    const note = byClass
      ? { title: "one-cost estimate, not used: this node is decided per workload class" } : {};
    const cells = [
      el("td", { class: "name" }, n.name),
      el("td", { class: "decided" }, !n.reported ? "–" : byClass ? "per class" : "avail"),
      el("td", { class: "avail", ...note }, num(n.avail)),
      el("td", { class: "reserved" }, String(n.reserved)),
      el("td", { class: "free", ...note }, num(n.free)),
      el("td", { class: "k" }, num(n.k)),
      el("td", { class: "capacity" }, num(n.capacity)),
      el("td", { class: "per_pod_cost" }, num(n.per_pod_cost, 3)),
      el("td", { class: "pods" }, n.pods === undefined ? "–" : String(n.pods)),
      el("td", { class: "mode" }, n.mode || "–"),
      el("td", { class: "age" }, n.data_age_seconds === undefined ? "–"
        : `${num(n.data_age_seconds, 1)} s`),
      el("td", { class: "flags" }, ...flags(n)),
    ];
    const row = el("tr", { "data-node": n.name, "data-decided": n.decided_by || "",
      class: n.stale ? "stale" : "fresh" }, ...cells);
    return row;
  });
  body.replaceChildren(...rows);
  if (!nodes.length) {
    body.append(el("tr", {}, el("td", { colspan: "12" }, "no node has reported yet")));
  }
  staleNodes = new Set(nodes.filter((n) => n.stale).map((n) => n.name));
}

function bytes(v) {
  if (v === null || v === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let x = Number(v);
  let i = 0;
  while (x >= 1024 && i < units.length - 1) { x /= 1024; i += 1; }
  return `${x.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function renderClasses(nodes) {
  const body = document.querySelector("#classes tbody");
  const rows = [];
  for (const n of nodes) {
    const c = n.classes;
    if (!c) continue;
    const head = Object.entries(c.headroom).map(([f, v]) => `${f} ${num(v)}`).join(", ")
      + ` (full at ${num(c.full_level)})`;
    const classes = c.classes.length ? c.classes : [null];
    classes.forEach((k, i) => {
      rows.push(el("tr", { "data-node": n.name, class: n.stale ? "stale" : "fresh" },
        el("td", { class: "name" }, i ? "" : n.name),
        el("td", { class: "headroom" }, i ? "" : head),
        el("td", { class: "class" }, k ? k.class : "no workload pod running"),
        el("td", { class: "pods" }, k ? String(k.pods) : ""),
        el("td", { class: "cpu" }, k ? num(k.cpu_cores) : ""),
        el("td", { class: "memory" }, k ? bytes(k.memory_bytes) : ""),
        el("td", { class: "source" }, k ? k.source : "")));
    });
  }
  body.replaceChildren(...rows);
  if (!rows.length) {
    body.append(el("tr", {}, el("td", { colspan: "7" },
      "no node reports per-class data (agents older than per-class costs)")));
  }
}

function renderGlobal(nodes, model) {
  const box = document.getElementById("global");
  const reported = nodes.filter((n) => n.reported);
  const merged = reported.filter((n) => n.health && n.health.global_model).length;
  const parts = [el("p", {}, `${merged} of ${reported.length} reporting nodes merge the global model.`)];
  box.className = model.available ? (model.stale ? "stale" : "fresh") : "absent";
  if (!model.available) {
    parts.push(el("p", {}, badge("ABSENT", "bad", "no agent has reported a global model"),
      " no agent has received a global model from the aggregator yet"));
    box.replaceChildren(...parts);
    return;
  }
  const why = "its node is stale or no longer merges it (older than the agents' global TTL)";
  parts.push(el("p", { class: "note" },
    ...(model.stale ? [badge("STALE", "bad", why), " "] : []),
    `Expected workload w = σ₁·u₁ (telemetry units: 1 is a full resource): version ${model.version} from ` +
    `${model.aggregator || "the aggregator"}, ${model.contributing_nodes} nodes contributing, ` +
    `${num(model.age_seconds, 1)} s old (via ${model.reported_by}).`));
  const w = model.expected_workload;
  const top = Math.max(1, ...w);
  const rows = model.feature_names.map((name, i) => el("tr", { "data-feature": name },
    el("td", { class: "feature" }, name),
    el("td", { class: "value" }, num(w[i], 3)),
    el("td", { class: "bar" }, el("span", { class: "fill",
      style: `width: ${(100 * w[i] / top).toFixed(1)}%` }))));
  parts.push(el("table", { id: "workload" },
    el("thead", {}, el("tr", {}, el("th", {}, "feature"), el("th", {}, "w"), el("th", {}, ""))),
    el("tbody", {}, ...rows)));
  box.replaceChildren(...parts);
}

function renderReservations(list) {
  const body = document.querySelector("#reservations tbody");
  body.replaceChildren(...list.map((r) => el("tr", {},
    el("td", {}, r.pod), el("td", {}, r.node), el("td", {}, `${num(r.age_seconds, 1)} s`))));
  document.getElementById("reservations-empty").hidden = list.length > 0;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function chart(name, points, now) {
  const W = 300, H = 110, L = 34, R = 4, T = 6, B = 14;
  // The window grows with the data (at least a minute, at most the ten minutes kept).
  const first = points.length ? points[0][0] : now;
  const span = Math.min(CHART_MAX_SECONDS, Math.max(CHART_MIN_SECONDS, now - first));
  const t0 = now - span;
  const pts = points.filter((p) => p[0] >= t0);
  const top = Math.max(1, ...pts.map((p) => Math.max(p[1] ?? 0, p[2])));
  const x = (t) => L + ((t - t0) / span) * (W - L - R);
  const y = (v) => T + (1 - v / top) * (H - T - B);
  const box = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none" });
  const step = pts.length > 1 ? (pts[pts.length - 1][0] - pts[0][0]) / (pts.length - 1) : 1;
  for (const p of pts) {
    if (p[3]) {
      box.append(svg("rect", { class: "stale", x: x(p[0] - step / 2), y: T,
        width: Math.max(1, x(p[0] + step / 2) - x(p[0] - step / 2)), height: H - T - B }));
    }
  }
  box.append(svg("line", { class: "axis", x1: L, x2: W - R, y1: y(0), y2: y(0) }));
  const label = (text, yy) => { const t = svg("text", { x: L - 3, y: yy, "text-anchor": "end" });
    t.textContent = text; box.append(t); };
  label(num(top, top < 10 ? 1 : 0), T + 8);
  label("0", y(0));
  const tl = svg("text", { x: L, y: H - 2 }); tl.textContent = span >= 120 ? `−${Math.round(span / 60)} min` : `−${Math.round(span)} s`; box.append(tl);
  const tr = svg("text", { x: W - R, y: H - 2, "text-anchor": "end" }); tr.textContent = "now";
  box.append(tr);
  const path = (idx) => {
    let d = "", pen = false;
    for (const p of pts) {
      if (p[idx] === null) { pen = false; continue; }
      d += `${pen ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[idx]).toFixed(1)}`;
      pen = true;
    }
    return d;
  };
  box.append(svg("path", { class: "avail", d: path(1) }));
  box.append(svg("path", { class: "reserved", d: path(2) }));
  const last = pts[pts.length - 1];
  return el("div", { class: "chart", "data-node": name },
    el("div", { class: "title" }, el("span", {}, name),
      el("span", {}, last ? `avail ${num(last[1])} · reserved ${last[2]}` : "")),
    box);
}

function renderHistory(h) {
  policy = h;
  document.getElementById("policy").textContent =
    `A node passes the filter when at least ${h.threshold} pod(s) of the incoming pod's class ` +
    `fit (avail − reserved ≥ ${h.threshold} on a node without per-class data). Data older than ` +
    `${h.stale_after_seconds} s is stale; stale nodes are handled ${h.stale_policy}` +
    (h.stale_policy === "fail-open" ? " (they pass with score 0)." : " (they fail the filter).");
  const charts = Object.entries(h.nodes).map(([name, pts]) => chart(name, pts, h.now));
  document.getElementById("charts").replaceChildren(...charts);
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const [nodes, reservations, history, model] = await Promise.all([
      getJSON("api/v1/nodes"), getJSON("api/v1/reservations"), getJSON("api/v1/history"),
      getJSON("api/v1/model")]);
    renderHistory(history);
    renderNodes(nodes);
    renderClasses(nodes);
    renderGlobal(nodes, model);
    renderReservations(reservations);
    refreshes += 1;
    document.body.dataset.refreshes = String(refreshes);
    status.className = "status";
    status.textContent = `updated ${new Date().toLocaleTimeString()} · every ${REFRESH_MS / 1000} s`;
  } catch (err) {
    status.className = "status error";
    status.textContent = `cannot reach the extender (${err.message}); retrying`;
  }
}

const PLAN_BADGE = { OPTIMAL: "ok", FEASIBLE: "ok", INFEASIBLE: "warn", ERROR: "bad" };

function repackState(s) {
  const parts = [`mode ${s.mode}`, `${s.unschedulable} pod(s) unschedulable`,
    `${s.stuck} past the ${s.debounce_seconds} s debounce`,
    `cooldown ${s.cooldown_seconds} s`, `time limit ${s.time_limit_seconds} s`];
  if (s.in_progress) parts.push(`${s.in_progress}…`);
  return parts.join(" · ");
}

function execution(p) {
  if (p.execution) {
    const e = p.execution;
    return e.reason ? `${e.state}: ${e.reason}` : e.state;
  }
  return p.mode === "dry-run" ? "not executed (dry-run)" : "–";
}

// The balancing engine's measure (docs/architecture.md#balancing): imbalance, largest free
// block (share of the largest node) or nodes that could go, before → after the plan.
function goalCell(p) {
  const g = (p.plan || {}).goal;
  if (!g) return p.goal || "place";
  const after = p.plan.moves.length ? ` → ${num(g.after, 3)}` : "";
  return `${g.goal} ${num(g.before, 3)}${after}`;
}

function goalTrend(plans) {
  const runs = plans.filter((p) => p.plan && p.plan.goal).reverse();  // oldest first
  if (!runs.length) return null;
  return el("p", { class: "note", id: "goal-trend" }, "balancing measure over time: " +
    runs.map((p) => `${p.plan.goal.goal} ${num(p.plan.goal.before, 3)}`).join(", "));
}

function planRow(p) {
  const plan = p.plan || {};
  const count = (key) => (plan[key] ? String(plan[key].length) : "–");
  const why = p.error || plan.message || "";
  return el("tr", { "data-plan": String(p.id) },
    el("td", { class: "when" }, new Date(p.timestamp * 1000).toLocaleTimeString()),
    el("td", { class: "trigger" }, p.trigger),
    el("td", { class: "goal" }, goalCell(p)),
    el("td", { class: "status" }, badge(p.status, PLAN_BADGE[p.status] || "", why)),
    el("td", { class: "moves" }, count("moves")),
    el("td", { class: "placements" }, count("placements")),
    el("td", { class: "evictions" }, count("evictions")),
    el("td", { class: "solve" }, plan.solve_seconds === undefined ? "–"
      : `${num(plan.solve_seconds, 2)} s`),
    el("td", { class: "execution" }, execution(p)));
}

function planSteps(p) {
  const plan = p.plan;
  if (!plan) return el("p", { class: "note" }, `#${p.id}: ${p.error}`);
  if (!plan.steps.length) {
    return el("p", { class: "note" }, `#${p.id}: ${plan.message || "nothing to do"}`);
  }
  return el("div", { class: "steps" },
    el("p", { class: "note" }, `#${p.id} (${p.mode}) steps, in order:`),
    el("ol", {}, ...plan.steps.map((s) => el("li", {},
      `${s.action} ${s.pod}: ${s.from || "(pending)"} → ${s.to || "(gone)"}`))));
}

async function refreshRepack() {
  const box = document.getElementById("repack");
  try {
    // The plans first: an extender without a repacker answers 404 there, and then only there.
    const plans = await getJSON("api/v1/repack/plans?limit=8");
    const state = await getJSON("api/v1/repack");
    box.className = "";
    const parts = [el("p", { class: "note", id: "repack-state" }, repackState(state))];
    if (!plans.length) {
      parts.push(el("p", { class: "note" }, "no repack plan yet"));
    } else {
      parts.push(el("table", { id: "repack-plans" },
        el("thead", {}, el("tr", {}, ...["when", "trigger", "goal", "status", "moves",
          "placements", "evictions", "solve", "execution"].map((h) => el("th", {}, h)))),
        el("tbody", {}, ...plans.map(planRow))));
      const trend = goalTrend(plans);
      if (trend) parts.push(trend);
      parts.push(planSteps(plans[0]));
    }
    box.replaceChildren(...parts);
  } catch (err) {
    box.className = "note";
    box.textContent = err.status === 404 ? "repacker not connected"
      : `cannot read repack plans (${err.message})`;
  }
}

async function explain(pod) {
  const box = document.getElementById("explain");
  try {
    const e = await getJSON(`api/v1/explain?pod=${encodeURIComponent(pod)}`);
    const rows = [];
    const f = e.filter;
    const scores = (e.prioritize && e.prioritize.scores) || {};
    const costs = (e.class && e.class.nodes) || {};
    const cost = (n) => {
      const c = costs[n];
      return c ? ` · ${c.fits} fit (room ${num(c.room)}), a pod costs ${num(c.cpu_cores)} cores, ` +
        `${bytes(c.memory_bytes)} (${c.source})` : "";
    };
    if (f) {
      for (const n of f.passed) {
        const failOpen = staleNodes.has(n);
        rows.push(el("tr", {}, el("td", {}, n),
          el("td", failOpen ? { class: "failopen" } : {},
            failOpen ? "passed · fail-open (stale data)" : `passed${cost(n)}`),
          el("td", {}, n in scores ? String(scores[n]) : "–")));
      }
      for (const [n, why] of Object.entries(f.failed)) {
        rows.push(el("tr", {}, el("td", {}, n), el("td", {}, `failed: ${why}`), el("td", {}, "–")));
      }
      for (const [n, why] of Object.entries(f.unresolvable)) {
        rows.push(el("tr", {}, el("td", {}, n), el("td", {}, `unresolvable: ${why}`),
          el("td", {}, "–")));
      }
    }
    const when = f ? `filtered ${num(f.age_seconds, 1)} s ago` : "no filter decision kept";
    const exempt = (f && f.exempt) ? ` · exempt: ${f.exempt}` : "";
    const klass = e.class ? ` · class ${e.class.class}` : "";
    box.replaceChildren(el("p", { class: "note" }, `${e.pod}: ${when}${exempt}${klass}`),
      el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "node"), el("th", {}, "filter"),
        el("th", {}, "score"))), el("tbody", {}, ...rows)));
  } catch (err) {
    const msg = err.body && err.body.Error ? err.body.Error : err.message;
    box.replaceChildren(el("p", { class: "note" }, msg));
  }
}

document.getElementById("explain-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  explain(document.getElementById("explain-pod").value.trim());
});
refresh();
refreshRepack();
setInterval(refresh, REFRESH_MS);
setInterval(refreshRepack, REPACK_MS);
