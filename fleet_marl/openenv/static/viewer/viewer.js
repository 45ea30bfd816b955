// fleet_marl viewer: replays a recorded episode or follows a live session (docs/viewer.md).
// Read-only: it only GETs /viewer/api/*, sends the bearer token from the URL fragment, and writes
// every value with textContent or an SVG attribute, never as HTML.
"use strict";
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
    "#b07aa1", "#ff9da7", "#9c755f", "#79706e", "#86bcb6", "#d37295"];
  // more than 12 tenants: Kelly's 20 colours of maximum contrast (without white and black)
  const KELLY = ["#0067a5", "#f38400", "#008856", "#be0032", "#875692", "#f3c300", "#a1caf1", "#c2b280", "#848482",
    "#e68fac", "#f99379", "#604e97", "#f6a600", "#b3446c", "#dcd300", "#882d17", "#8db600", "#654522", "#e25822", "#2b3d26"];
  const FLAGS = { oom: "out of memory", vetoed: "vetoed (unsafe)", unsafe_numerics: "unsafe precision",
    projected: "downgraded to safe", tripped: "node tripped (critical heat)", throttled: "throttled (power/heat)",
    restarted: "restarted (allocation changed)" };
  const S = { token: null, mode: null, header: null, frames: [], summary: null, index: 0,
    timer: null, live: null, poll: null };

  const $ = (id) => document.getElementById(id);
  function color(i) {
    const n = S.header ? S.header.tenants.length : 0;
    if (n <= PALETTE.length) return PALETTE[i];
    return i < KELLY.length ? KELLY[i] : `hsl(${(i * 137.5) % 360}, 55%, 50%)`;
  }
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = String(text);
    return e;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function num(x, digits) { return x === null || x === undefined ? "–" : Number(x).toFixed(digits); }
  function showError(text) { const e = $("error"); e.textContent = text; e.hidden = !text; }

  function readToken() {
    const params = new URLSearchParams(location.hash.slice(1));
    const t = params.get("token");
    if (t) {
      S.token = t;
      history.replaceState(null, "", location.pathname + location.search); // the token leaves the address bar
    }
  }

  async function api(path) {
    const headers = { Accept: "application/json" };
    if (S.token) headers.Authorization = "Bearer " + S.token;
    const r = await fetch(path, { headers, cache: "no-store", credentials: "omit", redirect: "error" });
    if (r.status === 401) { $("token-box").hidden = false; throw new Error("this server needs its token"); }
    if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
    return r.json();
  }

  // --- drawing -------------------------------------------------------------------------------

  function drawCluster(h, f) {
    const box = $("cluster");
    clear(box);
    const G = h.gpus_per_node, cell = 26, gap = 5, label = 96, pad = 10, head = 44;
    const racks = [];
    h.nodes.forEach((n, k) => { (racks[n.rack] = racks[n.rack] || []).push(k); });
    const rackW = label + G * (cell + gap) + pad * 2;
    const perRow = Math.max(1, Math.floor(900 / rackW));
    let maxH = 0;
    racks.forEach((nodes, r) => {
      const x0 = (r % perRow) * (rackW + 16), rowTop = Math.floor(r / perRow);
      const hgt = head + nodes.length * (cell + 14) + pad;
      maxH = Math.max(maxH, hgt);
      const g = svg("g", { transform: `translate(${x0},${rowTop * (hgt + 16)})`, class: "rack", "data-rack": r });
      g.appendChild(svg("rect", { x: 0, y: 0, width: rackW, height: hgt, rx: 8, class: "rack-frame" }));
      const power = f.rack_power_w[r] || 0, cap = h.rack_power_cap_w;
      g.appendChild(svg("text", { x: pad, y: 18, class: "rack-title" }, `rack ${r}`));
      g.appendChild(svg("text", { x: rackW - pad, y: 18, class: "rack-power", "text-anchor": "end" },
        `${(power / 1000).toFixed(1)} / ${(cap / 1000).toFixed(1)} kW`));
      const barW = rackW - 2 * pad, share = Math.min(power / cap, 1);
      g.appendChild(svg("rect", { x: pad, y: 26, width: barW, height: 6, rx: 3, class: "bar-bg" }));
      g.appendChild(svg("rect", { x: pad, y: 26, width: barW * share, height: 6, rx: 3,
        class: share >= 0.95 ? "bar hot" : "bar" }));
      nodes.forEach((k, j) => {
        const y = head + j * (cell + 14);
        const temp = f.node_temp_c[k];
        const hot = temp >= h.critical_temp_c ? "critical" : temp >= h.throttle_temp_c ? "hot" : "";
        g.appendChild(svg("text", { x: pad, y: y + 15, class: "node-label" }, `node ${k}`));
        g.appendChild(svg("text", { x: pad + 46, y: y + 15, class: `node-temp ${hot}`, "data-node": k },
          `${num(temp, 0)}°C`));
        let col = 0;
        f.placement.forEach((row, t) => {
          for (let n = 0; n < row[k]; n++, col++) {
            const r_ = svg("rect", { x: pad + label + col * (cell + gap), y, width: cell, height: cell, rx: 4,
              class: "gpu", fill: color(t), "data-tenant": t, "data-node": k });
            r_.appendChild(svg("title", {}, `${h.tenants[t].agent} on node ${k}`));
            g.appendChild(r_);
          }
        });
        for (; col < G; col++) {
          g.appendChild(svg("rect", { x: pad + label + col * (cell + gap), y, width: cell, height: cell, rx: 4,
            class: "gpu free", "data-node": k }));
        }
        g.appendChild(svg("text", { x: pad + label - 8, y: y + 30, class: "node-type", "text-anchor": "end" },
          h.nodes[k].gpu_type));
      });
      box.appendChild(g);
    });
    const rows = Math.ceil(racks.length / perRow);
    box.setAttribute("viewBox", `0 0 ${Math.min(racks.length, perRow) * (rackW + 16)} ${rows * (maxH + 16)}`);
    box.setAttribute("width", Math.min(racks.length, perRow) * (rackW + 16));
  }

  function drawLegend(h) {
    const box = $("legend");
    clear(box);
    h.tenants.forEach((t, i) => {
      const item = el("span", null, "legend-item");
      const sw = el("span", null, "swatch");
      sw.style.background = color(i);
      item.append(sw, el("span", `${t.agent} · ${t.kind} ${t.model}`));
      box.appendChild(item);
    });
  }

  function tenantHead(h) {
    const head = $("tenants").tHead;
    clear(head);
    const tr = document.createElement("tr");
    for (const c of ["tenant", "kind · model", "requested", "granted", "utility"]) tr.appendChild(el("th", c));
    h.schemes.forEach((s) => tr.appendChild(el("th", s === h.scheme ? `${s} (the env's)` : s, "scheme")));
    for (const c of ["starved", "events"]) tr.appendChild(el("th", c));
    head.appendChild(tr);
  }

  function roundEvents(h, f, prev) {
    // this round's events per tenant: safety flags, starvation, degenerate strategies (the
    // fairness counts' growth since the previous frame)
    return h.tenants.map((t, i) => {
      const ev = [];
      for (const k of Object.keys(FLAGS)) if (f[k] && f[k][i]) ev.push(k);
      if (f.starved[i]) ev.push(prev && prev.starved[i] ? "starved" : "starvation");
      const d = (f.counts.degenerate || [])[i] - (prev ? (prev.counts.degenerate || [])[i] : 0);
      if (d > 0) ev.push("degenerate");
      return ev;
    });
  }

  function drawTenants(h, f, events) {
    const body = $("tenants").tBodies[0];
    clear(body);
    h.tenants.forEach((t, i) => {
      const tr = el("tr", null, f.live[i] ? "" : "done");
      tr.dataset.agent = t.agent;
      const name = el("td", null, "agent");
      const sw = el("span", null, "swatch");
      sw.style.background = color(i);
      name.append(sw, el("span", t.agent + (f.live[i] ? "" : " (done)")));
      tr.appendChild(name);
      tr.appendChild(el("td", `${t.kind} · ${t.model}`, "muted"));
      tr.appendChild(el("td", f.requested[i], "requested num"));
      const granted = el("td", f.alloc[i], "granted num");
      if (f.alloc[i] < f.requested[i]) granted.classList.add("short");
      tr.appendChild(granted);
      tr.appendChild(el("td", num(f.utility[i], 3), "utility num"));
      h.schemes.forEach((s) => {
        const v = f.rewards[s] ? f.rewards[s][i] : null;
        const td = el("td", num(v, 3), "reward num" + (v < 0 ? " neg" : ""));
        td.dataset.scheme = s;
        tr.appendChild(td);
      });
      tr.appendChild(el("td", f.streak[i] ? `${f.streak[i]} round${f.streak[i] > 1 ? "s" : ""}` : "–", f.starved[i] ? "starved" : "muted"));
      const evTd = el("td", null, "events");
      events[i].forEach((e) => evTd.appendChild(el("span", e, "badge " + e)));
      tr.appendChild(evTd);
      body.appendChild(tr);
    });
  }

  function drawRacks(h, f) {
    const body = $("racks").tBodies[0];
    clear(body);
    for (let r = 0; r < h.racks; r++) {
      const nodes = h.nodes.map((n, k) => k).filter((k) => h.nodes[k].rack === r);
      const temps = nodes.map((k) => f.node_temp_c[k]);
      const hottest = Math.max(...temps);
      const tr = el("tr");
      tr.dataset.rack = r;
      tr.appendChild(el("td", r));
      tr.appendChild(el("td", `${num(f.rack_power_w[r] / 1000, 2)} kW`, "num power"));
      tr.appendChild(el("td", `${num((100 * f.rack_power_w[r]) / h.rack_power_cap_w, 0)}%`, "num"));
      tr.appendChild(el("td", `${num(hottest, 1)} °C`, "num" + (hottest >= h.throttle_temp_c ? " hot" : "")));
      tr.appendChild(el("td", temps.map((x) => num(x, 0)).join(" · "), "muted"));
      body.appendChild(tr);
    }
    drawHeat(h, f);
  }

  function drawHeat(h, f) {
    // each node's temperature from ambient, against the throttle (dashed) and critical (red) lines
    const box = $("heat");
    clear(box);
    const W = 420, row = 20, P = 64, top = 16, lo = h.ambient_c - 5, hi = h.critical_temp_c + 5;
    const x = (c) => P + ((W - P - 40) * (Math.min(Math.max(c, lo), hi) - lo)) / (hi - lo);
    const H = top + h.nodes.length * row + 6;
    box.setAttribute("viewBox", `0 0 ${W} ${H}`);
    box.setAttribute("height", H);
    h.nodes.forEach((n, k) => {
      const t = f.node_temp_c[k], y = top + k * row;
      const cls = t >= h.critical_temp_c ? "critical" : t >= h.throttle_temp_c ? "hot" : "";
      box.appendChild(svg("text", { x: 0, y: y + 12, class: "tick" }, `r${n.rack} node ${k}`));
      box.appendChild(svg("rect", { x: P, y: y + 2, width: Math.max(x(t) - P, 1), height: row - 8, rx: 3, class: `heat ${cls}` }));
      box.appendChild(svg("text", { x: x(t) + 4, y: y + 12, class: "tick" }, `${num(t, 0)}°C`));
    });
    for (const [c, cls, side] of [[h.throttle_temp_c, "throttle", "end"], [h.critical_temp_c, "critical-line", "start"]]) {
      box.appendChild(svg("line", { x1: x(c), y1: top - 4, x2: x(c), y2: H - 4, class: cls }));
      box.appendChild(svg("text", { x: x(c) + (side === "end" ? -3 : 3), y: 10, class: "tick", "text-anchor": side }, `${num(c, 0)}°`));
    }
  }

  function drawEvents(h, f, events) {
    const list = $("events");
    clear(list);
    let any = false;
    events.forEach((ev, i) => ev.forEach((e) => {
      any = true;
      const li = el("li");
      li.append(el("span", e, "badge " + e), el("span", ` ${h.tenants[i].agent}: ${FLAGS[e] || describe(e, f, i)}`));
      list.appendChild(li);
    }));
    if (!any) list.appendChild(el("li", "none", "muted"));
  }

  function describe(e, f, i) {
    if (e === "starvation") return "starts starving (served below its fair share)";
    if (e === "starved") return `starving for ${f.streak[i]} rounds`;
    if (e === "degenerate") return "a degenerate strategy (lowest precision or hoarding)";
    return e;
  }

  function drawTimeline() {
    const box = $("timeline");
    clear(box);
    const W = 420, H = 120, P = 26;
    const ys = S.frames.map((f) => f.welfare || 0);
    const lo = Math.min(0, ...ys), hi = Math.max(1e-9, ...ys);
    const n = Math.max(S.frames.length - 1, 1);
    const x = (i) => P + ((W - P - 6) * i) / n;
    const y = (v) => H - 16 - ((H - 26) * (v - lo)) / (hi - lo);
    box.setAttribute("viewBox", `0 0 ${W} ${H}`);
    box.appendChild(svg("line", { x1: P, y1: y(0), x2: W - 6, y2: y(0), class: "axis" }));
    box.appendChild(svg("polyline", { points: ys.map((v, i) => `${x(i)},${y(v)}`).join(" "), class: "line" }));
    box.appendChild(svg("line", { x1: x(S.index), y1: 8, x2: x(S.index), y2: H - 16, class: "cursor" }));
    box.appendChild(svg("text", { x: 2, y: 14, class: "tick" }, num(hi, 2)));
    box.appendChild(svg("text", { x: 2, y: H - 18, class: "tick" }, num(lo, 2)));
    box.appendChild(svg("text", { x: W - 6, y: H - 2, class: "tick", "text-anchor": "end" }, `round ${S.frames.length - 1}`));
  }

  function render() {
    const h = S.header, f = S.frames[S.index];
    if (!h || !f) return;
    const prev = S.index > 0 ? S.frames[S.index - 1] : null;
    const events = roundEvents(h, f, prev);
    const label = $("round");
    label.textContent = `round ${f.round} / ${h.max_rounds}`;
    label.dataset.round = f.round;
    document.body.dataset.round = f.round;
    $("slider").max = S.frames.length - 1;
    $("slider").value = S.index;
    drawCluster(h, f);
    drawRacks(h, f);
    drawTenants(h, f, events);
    drawEvents(h, f, events);
    drawTimeline();
    $("totals").textContent = `welfare this round ${num(f.welfare, 3)} · so far ${num(f.welfare_sum, 2)} · ` +
      `Jain ${num(f.jain, 2)}`;
  }

  function setHeader(h) {
    S.header = h;
    const what = h.policy ? `${h.policy}, seed ${h.seed}` : `${h.mode} view, session ${h.id}`;
    $("about").textContent = `task ${h.task} · ${what} · ${h.tenants.length} tenants · ${h.nodes.length} nodes ` +
      `× ${h.gpus_per_node} GPUs in ${h.racks} rack${h.racks > 1 ? "s" : ""} · reward scheme ${h.scheme}`;
    drawLegend(h);
    tenantHead(h);
  }

  // --- navigation ----------------------------------------------------------------------------

  function go(i) {
    S.index = Math.max(0, Math.min(S.frames.length - 1, i));
    render();
  }
  function stop() { if (S.timer) { clearInterval(S.timer); S.timer = null; } $("play").textContent = "▶ play"; }
  function play() {
    if (S.mode === "live") { S.follow = !S.follow; $("play").textContent = S.follow ? "❚❚ following" : "▶ follow"; return; }
    if (S.timer) return stop();
    if (S.index >= S.frames.length - 1) go(0);
    $("play").textContent = "❚❚ pause";
    S.timer = setInterval(() => { if (S.index >= S.frames.length - 1) stop(); else go(S.index + 1); }, 400);
  }

  function wire() {
    $("first").addEventListener("click", () => { stop(); go(0); });
    $("prev").addEventListener("click", () => { stop(); go(S.index - 1); });
    $("next").addEventListener("click", () => { stop(); go(S.index + 1); });
    $("last").addEventListener("click", () => { stop(); go(S.frames.length - 1); });
    $("play").addEventListener("click", play);
    $("slider").addEventListener("input", (e) => { stop(); go(Number(e.target.value)); });
    $("token-go").addEventListener("click", () => { S.token = $("token").value.trim(); $("token-box").hidden = true; start(); });
    $("session").addEventListener("change", (e) => { S.live = e.target.value; S.frames = []; S.header = null; });
    document.addEventListener("keydown", (e) => {
      if (e.target && e.target.tagName === "INPUT" && e.target.type !== "range") return;
      if (e.key === "ArrowRight") { stop(); go(S.index + 1); }
      else if (e.key === "ArrowLeft") { stop(); go(S.index - 1); }
      else if (e.key === "Home") { stop(); go(0); }
      else if (e.key === "End") { stop(); go(S.frames.length - 1); }
      else if (e.key === " ") { e.preventDefault(); play(); }
    });
  }

  // --- live sessions -------------------------------------------------------------------------

  async function pollLive() {
    try {
      const list = (await api("/viewer/api/sessions")).sessions;
      const sel = $("session");
      const known = new Set(list.map((s) => s.id));
      if (!S.live || !known.has(S.live)) S.live = list.length ? list[0].id : null;
      clear(sel);
      list.forEach((s) => {
        const o = el("option", `${s.id} · ${s.task} · ${s.mode} · round ${s.round}/${s.max_rounds}`);
        o.value = s.id;
        o.selected = s.id === S.live;
        sel.appendChild(o);
      });
      if (!S.live) { $("about").textContent = "no live session yet: it appears here once a client resets one"; return; }
      const snap = await api(`/viewer/api/sessions/${encodeURIComponent(S.live)}`);
      const last = S.frames[S.frames.length - 1];
      if (!S.header || S.header.id !== snap.header.id || (last && snap.frame.round < last.round)) { S.frames = []; setHeader(snap.header); }
      const fresh = S.frames.length === 0 || snap.frame.round !== S.frames[S.frames.length - 1].round;
      if (fresh) S.frames.push(snap.frame);
      if (fresh && (S.follow || S.frames.length === 1)) {
        S.index = S.frames.length - 1;
        render();
      }
      showError("");
    } catch (err) { showError(String(err.message || err)); }
  }

  async function start() {
    try {
      S.mode = (await api("/viewer/api/source")).mode;
      if (S.mode === "replay") {
        const ep = await api("/viewer/api/episode");
        S.frames = ep.frames;
        S.summary = ep.summary;
        setHeader(ep.header);
        go(0);
      } else {
        $("session-box").hidden = false;
        S.follow = true;
        $("play").textContent = "❚❚ following";
        if (!S.poll) S.poll = setInterval(pollLive, 1000);
        await pollLive();
      }
      showError("");
    } catch (err) { showError(String(err.message || err)); }
  }

  readToken();
  wire();
  start();
  window.addEventListener("hashchange", () => { // a token pasted into the address bar's fragment
    const before = S.token;
    readToken();
    if (S.token !== before) { $("token-box").hidden = true; start(); }
  });
})();
