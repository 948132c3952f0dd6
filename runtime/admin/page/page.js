// The acemq-flow status page: polls the admin API's read-only endpoints
// every two seconds and draws what they say. Every text from the runtime
// goes in through textContent, never as markup.
"use strict";
(function () {
  const POLL_MS = 2000;
  const SVG = "http://www.w3.org/2000/svg";
  const OUTCOMES = ["acknowledged", "retried", "dead_lettered", "stopped", "duplicate", "in_progress", "rejected", "republished"];
  const SHORT = { acknowledged: "ack", retried: "retried", dead_lettered: "dead", stopped: "stopped", duplicate: "dup", in_progress: "in progress", rejected: "rejected", republished: "republished" };

  // el makes an element: attrs sets attributes ("text" sets its text),
  // children are elements or strings.
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === "text") e.textContent = String(v);
      else e.setAttribute(k, String(v));
    }
    for (const c of children) e.append(c);
    return e;
  }
  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") e.textContent = String(v);
      else e.setAttribute(k, String(v));
    }
    return e;
  }
  function replace(id, ...children) {
    const box = document.getElementById(id);
    box.replaceChildren(...children);
  }
  function table(head, rows, attrs) {
    const t = el("table", attrs);
    const tr = el("tr");
    for (const h of head) tr.append(el("th", typeof h === "string" ? { text: h } : h));
    t.append(el("thead", {}, tr));
    const body = el("tbody");
    for (const r of rows) body.append(r);
    t.append(body);
    return t;
  }
  function cell(text, attrs) { return el("td", Object.assign({ text: text }, attrs || {})); }
  function num(n, attrs) { return cell(n === undefined || n === null ? "–" : n, Object.assign({ class: "num" }, attrs || {})); }

  async function getJSON(path) {
    const resp = await fetch(path, { cache: "no-store", headers: { Accept: "application/json" } });
    let body = {};
    try { body = await resp.json(); } catch (e) { /* not JSON */ }
    if (!resp.ok) throw new Error(body.error || resp.status + " " + resp.statusText);
    return body;
  }

  // poll reads v1/<name> and hands it to render; a failure shows in the
  // section, the last picture stays.
  async function poll(name, render) {
    const err = document.getElementById(name + "-error");
    try {
      render(await getJSON("v1/" + name));
      err.hidden = true;
    } catch (e) {
      err.textContent = "could not read v1/" + name + ": " + e.message;
      err.hidden = false;
    }
  }

  // ---- flows -------------------------------------------------------------

  const NODE_W = 220, COL_GAP = 70, ROW_GAP = 34, PAD = 12;
  const drawn = { key: "" };       // the graph drawn, so it is drawn once
  const previous = new Map();      // consumer id -> {at, settled}: for rates

  // layout places a cluster's nodes, and the loose nodes (exchanges,
  // schedules) that lead into it, in columns: a node follows the nodes its
  // solid edges come from; one reached only by dashed edges (a
  // compensation) goes under the node it hangs from.
  function layout(cluster, graph) {
    const inside = new Set(cluster.nodes.map(n => n.id));
    const loose = new Map(graph.loose.map(n => [n.id, n]));
    const edges = graph.edges.filter(e => inside.has(e.to) && (inside.has(e.from) || loose.has(e.from)));
    const nodes = [];
    const seen = new Set();
    for (const e of edges) {
      if (!inside.has(e.from) && !seen.has(e.from)) { seen.add(e.from); nodes.push(Object.assign({ loose: true }, loose.get(e.from))); }
    }
    nodes.push(...cluster.nodes);
    const index = new Map(nodes.map((n, i) => [n.id, i]));
    const col = new Map(), row = new Map(), next = new Map();
    for (const n of nodes) {
      const ins = edges.filter(e => e.to === n.id && index.get(e.from) < index.get(n.id));
      const solid = ins.filter(e => !e.dashed);
      let c = 0, r = 0;
      if (solid.length) c = Math.max(...solid.map(e => col.get(e.from) + 1));
      else if (ins.length) { c = col.get(ins[0].from); r = row.get(ins[0].from) + 1; }
      r = Math.max(r, next.get(c) || 0);
      col.set(n.id, c); row.set(n.id, r); next.set(c, r + 1);
    }
    return { nodes, edges, col, row };
  }

  function nodeHeight(n) {
    const lines = n.label.split("\n").length;
    return 18 + lines * 15 + (n.consumer ? 3 * 15 + 4 : 0);
  }

  function drawCluster(cluster, graph, stats) {
    const { nodes, edges, col, row } = layout(cluster, graph);
    const rowH = Math.max(60, ...nodes.map(nodeHeight)) + ROW_GAP;
    const cols = Math.max(0, ...nodes.map(n => col.get(n.id))) + 1;
    const rows = Math.max(0, ...nodes.map(n => row.get(n.id))) + 1;
    const width = PAD * 2 + cols * NODE_W + (cols - 1) * COL_GAP;
    const height = PAD * 2 + rows * rowH - ROW_GAP;
    const s = svg("svg", { width: width, height: height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": cluster.label });
    const defs = svg("defs");
    const marker = svg("marker", { id: "arrow-" + cluster.id, viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
    marker.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow" }));
    defs.append(marker);
    s.append(defs);
    const box = new Map();
    for (const n of nodes) {
      const x = PAD + col.get(n.id) * (NODE_W + COL_GAP), y = PAD + row.get(n.id) * rowH;
      box.set(n.id, { x: x, y: y, w: NODE_W, h: nodeHeight(n) });
    }
    for (const e of edges) {
      const a = box.get(e.from), b = box.get(e.to);
      let x1, y1, x2, y2;
      if (a.x < b.x) { x1 = a.x + a.w; y1 = a.y + a.h / 2; x2 = b.x; y2 = b.y + b.h / 2; }
      else if (a.x > b.x) { x1 = a.x; y1 = a.y + a.h / 2; x2 = b.x + b.w; y2 = b.y + b.h / 2; }
      else if (a.y < b.y) { x1 = a.x + a.w / 2; y1 = a.y + a.h; x2 = b.x + b.w / 2; y2 = b.y; }
      else { x1 = a.x + a.w / 2; y1 = a.y; x2 = b.x + b.w / 2; y2 = b.y + b.h; }
      const mx = (x1 + x2) / 2;
      const d = a.x === b.x ? `M ${x1} ${y1} L ${x2} ${y2}` : `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`;
      s.append(svg("path", { d: d, class: "edge-line" + (e.dashed ? " dashed" : ""), "marker-end": `url(#arrow-${cluster.id})` }));
      if (e.label) {
        const t = svg("text", { x: mx + 4, y: (y1 + y2) / 2 - 4, class: "edge", text: e.label.length > 34 ? e.label.slice(0, 33) + "…" : e.label });
        t.append(svg("title", { text: e.label }));
        s.append(t);
      }
    }
    for (const n of nodes) {
      const b = box.get(n.id);
      const g = svg("g", { "data-node": n.id });
      const rx = n.shape === "round" ? 14 : n.shape === "stadium" ? Math.min(b.h / 2, 24) : n.shape === "diamond" ? 0 : 4;
      const rect = svg("rect", { x: b.x, y: b.y, width: b.w, height: b.h, rx: rx, class: "node" + (n.loose ? " loose" : "") });
      g.append(rect);
      g.append(svg("title", { text: n.label }));
      let y = b.y + 18;
      n.label.split("\n").forEach((line, i) => {
        const t = line.length > 32 ? line.slice(0, 31) + "…" : line;
        g.append(svg("text", { x: b.x + 8, y: y, class: i === 0 ? "title" : "", text: t }));
        y += 15;
      });
      if (n.consumer) {
        const lines = [];
        for (let i = 0; i < 3; i++) {
          const t = svg("text", { x: b.x + 8, y: y + 4, class: "stat", "data-consumer": n.consumer, "data-line": i });
          g.append(t);
          lines.push(t);
          y += 15;
        }
        stats.set(n.consumer, { rect: rect, lines: lines });
      }
      s.append(g);
    }
    return s;
  }

  function drawFlows(v) {
    const key = JSON.stringify(v.graph);
    if (drawn.key === key) return;
    drawn.key = key;
    drawn.stats = new Map();
    drawn.tables = new Map();
    const parts = [];
    if (v.graph.clusters.length === 0) parts.push(el("p", { class: "muted", text: "the runtime runs no flow" }));
    for (const c of v.graph.clusters) {
      const consumers = c.nodes.filter(n => n.consumer).map(n => n.consumer);
      const div = el("div", { class: "cluster", "data-cluster": c.id });
      div.append(el("h3", { text: c.label }));
      div.append(el("div", { class: "graph" }, drawCluster(c, v.graph, drawn.stats)));
      if (consumers.length) {
        const head = ["consumer", "state", { text: "depth", class: "num" }, { text: "consumers", class: "num" }, { text: "in flight", class: "num" }, { text: "settled/s", class: "num" }]
          .concat(OUTCOMES.map(o => ({ text: SHORT[o], class: "num", title: o })));
        const rows = consumers.map(id => {
          const tr = el("tr", { "data-consumer": id }, cell(id));
          for (const f of ["state", "depth", "size", "in_flight", "rate"].concat(OUTCOMES)) {
            tr.append(el("td", { class: f === "state" ? "" : "num", "data-consumer": id, "data-field": f, text: "–" }));
          }
          drawn.tables.set(id, tr);
          return tr;
        });
        div.append(table(head, rows, { class: "consumers" }));
      }
      parts.push(div);
    }
    replace("flows", ...parts);
  }

  function updateFlows(v) {
    drawFlows(v);
    const ready = document.getElementById("ready");
    ready.textContent = v.ready ? "ready" : "not ready";
    ready.className = "badge " + (v.ready ? "ok" : "bad");
    document.getElementById("why").textContent = (v.why || []).join("; ");
    const at = Date.parse(v.at) || Date.now();
    for (const c of v.consumers) {
      const counters = c.counters || {};
      const settled = OUTCOMES.reduce((sum, o) => sum + (counters[o] || 0), 0);
      // Settled deliveries per second between two answers (the same
      // answer twice keeps the rate it gave).
      const prev = previous.get(c.id);
      let rate = prev ? prev.rate : null;
      if (prev && at > prev.at) rate = ((settled - prev.settled) * 1000) / (at - prev.at);
      if (!prev || at > prev.at) previous.set(c.id, { at: at, settled: settled, rate: rate });
      // A stalled group holds deliveries and has finished none for longer
      // than its stall duration: shown as its state, with how many and since.
      const state = c.stalled ? `stalled: ${c.stalled.held} held, none finished since ${String(c.stalled.since).replace(/\.\d+Z$/, "Z")}` : c.state;
      const values = { state: state, depth: c.depth, size: c.size, in_flight: c.in_flight, rate: rate === null ? "–" : rate.toFixed(1) };
      for (const o of OUTCOMES) values[o] = counters[o] || 0;
      const tr = drawn.tables.get(c.id);
      if (tr) {
        for (const td of tr.querySelectorAll("td[data-field]")) {
          const f = td.getAttribute("data-field");
          const val = values[f];
          td.textContent = val === undefined || val === null ? "–" : String(val);
          td.classList.toggle("hot", (f === "dead_lettered" || f === "rejected") && val > 0);
          td.classList.toggle("warm", f === "depth" && val > 0);
          if (f === "state") td.classList.toggle("hot", !!c.stalled);
        }
      }
      const st = drawn.stats.get(c.id);
      if (st) {
        st.lines[0].textContent = `depth ${c.depth === undefined ? "?" : c.depth} · ${c.size} consumer${c.size === 1 ? "" : "s"} · ${c.stalled ? "stalled" : c.state}`;
        st.lines[1].textContent = `${values.rate}/s · ${c.in_flight} in flight`;
        st.lines[2].textContent = `✓ ${values.acknowledged}  ↻ ${values.retried}  ✗ ${values.dead_lettered}`;
        let cls = "node";
        if (c.stalled) cls += " stalled";
        else if (values.dead_lettered > 0) cls += " dead";
        else if (c.depth > 0) cls += " waiting";
        if (c.state !== "running") cls += " stopped";
        st.rect.setAttribute("class", cls);
      }
    }
  }

  // ---- dead letters --------------------------------------------------------

  const open = new Set(); // groups whose first messages are shown

  function groupKey(g) { return [g.queue, g.error_kind || "", g.error].join("\u0000"); }

  function messageView(m) {
    const facts = [["message", m.message_id], ["attempt", m.attempt], ["replays", m.replays], ["failed at", m.failed_at],
      ["failed in", m.failed_queue], ["route", m.route_text], ["slip", m.slip_text], ["type", m.type],
      ["claim check", m.claim_check ? m.claim_check.key + " (" + m.claim_check.size + " bytes)" : undefined],
      ["avro", m.avro ? "schema " + m.avro.schema_id + (m.avro.decoded ? ", shown as JSON" : ", shown in hex: " + m.avro.note) : undefined]];
    const dl = el("div", { class: "message", "data-message": m.message_id });
    dl.append(el("div", { class: "muted", text: facts.filter(f => f[1] !== undefined && f[1] !== "" && f[1] !== null).map(f => f[0] + " " + f[1]).join(" · ") }));
    dl.append(el("pre", { "data-field": "preview", text: m.preview + (m.truncated ? " …" : "") }));
    dl.append(el("div", { class: "muted", text: `payload ${m.size} bytes` + (m.truncated ? ", the first 200 shown" : "") }));
    return dl;
  }

  function renderDeadLetters(v) {
    if (v.groups.length === 0) {
      const read = v.queues.length;
      replace("deadletters", el("p", { class: "muted", text: `no dead letters (${read} .dlq queue${read === 1 ? "" : "s"} read)` }));
      return;
    }
    const rows = [];
    for (const g of v.groups) {
      const key = groupKey(g);
      const button = el("button", { type: "button", "data-group": key, text: open.has(key) ? "hide" : "first messages" });
      button.addEventListener("click", () => {
        if (open.has(key)) open.delete(key); else open.add(key);
        renderDeadLetters(v);
      });
      rows.push(el("tr", { "data-group": key },
        cell(g.flow), cell(g.step || g.consumer), cell(g.error, { "data-field": "error" }), cell(g.error_kind || ""),
        num(g.count, { "data-field": "count" }), cell(g.queue), el("td", {}, button)));
      if (open.has(key)) {
        const td = el("td", { colspan: 7, "data-first": key });
        for (const m of g.first) td.append(messageView(m));
        rows.push(el("tr", {}, td));
      }
    }
    const notes = v.queues.filter(q => q.depth > q.read).map(q => `${q.queue}: the first ${q.read} of ${q.depth} read`);
    replace("deadletters",
      table(["flow", "step", "error", "kind", { text: "count", class: "num" }, "queue", ""], rows, { class: "deadletters" }),
      el("p", { class: "muted", text: notes.length ? notes.join("; ") : "read without taking any: each .dlq's first 100 messages are looked at and put back" }));
  }

  // ---- delays --------------------------------------------------------------

  function renderDelays(v) {
    const waiting = v.levels.reduce((n, l) => n + l.depth, 0);
    const busy = v.levels.filter(l => l.depth > 0);
    const parts = [el("p", { "data-field": "delays-summary", text:
      `${waiting} message${waiting === 1 ? "" : "s"} waiting in the levels · ${v.due} due in acemq.schedule.due (${v.due_consumers} consumer${v.due_consumers === 1 ? "" : "s"}) · ${v.unroutable} unroutable` +
      (v.complete ? "" : ` among the first ${v.scanned} read of levels 1 and 3`) })];
    if (busy.length) {
      parts.push(table(["level", "queue", "wait", { text: "depth", class: "num" }, "head due at", "head goes to"],
        busy.map(l => el("tr", { "data-level": l.level }, cell(l.level), cell(l.queue), cell(l.wait), num(l.depth), cell(l.head_due_at || "–"), cell(l.head_destination || "–")))));
    } else {
      parts.push(el("p", { class: "muted", text: "every level is empty" }));
    }
    replace("delays", ...parts);
  }

  // ---- schedules -----------------------------------------------------------

  function renderSchedules(v) {
    if (v.schedules.length === 0) {
      replace("schedules", el("p", { class: "muted", text: "the runtime's flows have no schedules" }));
      return;
    }
    replace("schedules", table(["flow", "schedule", "when", "timezone", "missed policy", "last tick", "next tick", { text: "missed", class: "num" }],
      v.schedules.map(s => el("tr", { "data-schedule": s.flow + "/" + s.name },
        cell(s.flow), cell(s.name), cell(s.cron ? "cron " + s.cron : "every " + s.every), cell(s.timezone),
        cell(s.missed_policy + (s.missed_policy === "skip" ? "" : " within " + s.missed_window)),
        cell(s.last_tick || "never", { "data-field": "last_tick" }), cell(s.next_tick || "none within five years", { "data-field": "next_tick" }),
        num(s.missed, { "data-field": "missed", class: s.missed > 0 ? "num warm" : "num" })))));
  }

  // ---- sagas ---------------------------------------------------------------

  function renderSagas(v) {
    if (v.sagas.length === 0) {
      replace("sagas", el("p", { class: "muted", text: "the runtime's flows have no sagas" }));
      return;
    }
    const parts = [table(["saga"].concat(v.states.map(s => ({ text: s, class: "num" }))),
      v.sagas.map(s => el("tr", { "data-saga": s.saga }, cell(s.saga),
        ...v.states.map(state => num(s.states[state] || 0, { "data-field": state, class: state === "unresolved" && s.states[state] > 0 ? "num hot" : "num" })))))];
    if (v.unresolved.length) {
      parts.push(el("h3", { text: "unresolved instances, newest first (acemq-flow sagas show ID)" }));
      parts.push(table(["saga", "instance", "step", "error", "started", "ended"],
        v.unresolved.map(u => el("tr", {}, cell(u.saga), cell(u.id), cell(u.step || ""), cell(u.error || ""), cell(u.started_at), cell(u.ended_at || "")))));
    }
    replace("sagas", ...parts);
  }

  async function tick() {
    await Promise.all([
      poll("flows", updateFlows),
      poll("deadletters", renderDeadLetters),
      poll("delays", renderDelays),
      poll("schedules", renderSchedules),
      poll("sagas", renderSagas),
    ]);
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    setTimeout(tick, POLL_MS);
  }
  tick();
})();
