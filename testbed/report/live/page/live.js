// The live page: the records of testbed/report/live/livefeed.py, streamed by testbed/report/live/liveserver.py
// (Server-Sent Events, one JSON record each), drawn with the vendored uPlot. One run's charts at a
// time (the latest with traffic), the paper's expectation beside the measured lines (the fair share
// and the bottleneck's rate beside the acked rate, the BDP beside cwnd); the checks and runs beside.
"use strict";

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];
const REDRAW_MS = 250;  // at least twice a second, as the feed reads
const state = { records: 0, flowPoints: 0, queuePoints: 0, checks: 0, run: null, ended: false,
                session: null, runs: {}, expect: {}, conns: {}, checksByRun: {}, claims: null, progress: null,
                progressAt: 0 };
window.live = state;  // what the browser tests read

let series = null;  // the shown run's columns
let charts = {};
let dirty = false;

function newRun(run) {
  state.run = run;
  if ((state.runs[run] || {}).status === "planned") state.runs[run].status = "running";  // a replay's
  series = { flows: {}, queues: {} };
  document.getElementById("run-title").textContent = "run: " + run;
  for (const c of Object.values(charts)) c.destroy();
  charts = {};
}

function column(map, key) {
  if (!map[key]) map[key] = { t: [], a: [], b: [], c: [] };
  return map[key];
}

function onRecord(r) {
  state.records += 1;
  if (r.kind === "session") {
    state.session = r.name;
    document.getElementById("title").textContent = "cc-testbed live: " + r.name;
    for (const run of r.runs) state.runs[run] = { status: "planned" };
  } else if (r.kind === "progress") {
    state.progress = r; state.progressAt = Date.now();
  } else if (r.kind === "run") {
    if (r.status) state.runs[r.run] = Object.assign(state.runs[r.run] || {}, { status: r.status });
    if (r.expect) { state.expect[r.run] = r.expect; state.conns[r.run] = r.conns || {}; }
  } else if (r.kind === "flow" || r.kind === "queue") {
    if (r.run !== state.run) newRun(r.run);
    if (r.kind === "flow") {
      const col = column(series.flows, r.conn);
      col.t.push(r.t); col.a.push(r.acked_mbit); col.b.push(r.cwnd); col.c.push(r.rtt_ms);
      (col.s = col.s || []).push(r.ssthresh);
      state.flowPoints += 1;
    } else {
      const col = column(series.queues, r.link);
      col.t.push(r.t); col.a.push(r.backlog_pkts); col.b.push(r.drops); col.c.push(r.marks);
      state.queuePoints += 1;
    }
  } else if (r.kind === "check") {
    if (state.run === null) newRun(r.run);
    (state.checksByRun[r.run] = state.checksByRun[r.run] || []).push(r);
    state.checks += 1;
  } else if (r.kind === "claims") {
    state.claims = r.claims;
  } else if (r.kind === "result") {
    state.runs[r.run] = Object.assign(state.runs[r.run] || {}, r);
  }
  dirty = true;
}

// One chart: x the run's time; ys the given columns of each key; flat lines for the expectations.
function draw(id, title, unit, map, picks, flat) {
  const keys = Object.keys(map).sort();
  if (!keys.length) return;
  const t = [...new Set(keys.flatMap(k => map[k].t))].sort((x, y) => x - y);
  const data = [t];
  const opts = { title: title, width: document.getElementById(id).clientWidth || 800, height: 180,
                 scales: { x: { time: false } }, axes: [{ label: "s" }, { label: unit }], series: [{}] };
  let n = 0;
  for (const k of keys) {
    for (const [name, pick] of picks) {
      const at = new Map(map[k].t.map((x, i) => [x, pick(map[k])[i]]));
      data.push(t.map(x => (at.has(x) ? at.get(x) : null)));
      opts.series.push({ label: k + " " + name, stroke: COLORS[n % COLORS.length], spanGaps: true,
                         dash: name === "ssthresh" ? [6, 4] : undefined });
      n += 1;
    }
  }
  for (const [name, value] of flat) {
    if (value == null) continue;
    data.push(t.map(() => value));
    opts.series.push({ label: name, stroke: "#888", dash: [2, 6] });
  }
  if (charts[id] && charts[id].series.length === opts.series.length) {
    charts[id].setData(data);
    const heading = charts[id].root.querySelector(".u-title");
    if (heading) heading.textContent = title;  // the queue's counts move
  } else {
    if (charts[id]) charts[id].destroy();  // a flow or a queue more than the chart has: drawn anew
    charts[id] = new uPlot(opts, data, document.getElementById(id));
  }
}

function redraw() {
  if (!dirty) { tickProgress(); return; }
  dirty = false;
  tickProgress();
  if (series) {
    const e = state.expect[state.run] || {};
    draw("chart-rate", "acked rate (snd_una over the last second)", "Mbit/s", series.flows, [["acked", c => c.a]],
         [["fair share", e.fair_mbit], ["bottleneck rate", e.rate_mbit]]);
    draw("chart-cwnd", "congestion window", "packets", series.flows, [["cwnd", c => c.b], ["ssthresh", c => c.s]],
         [["BDP", e.bdp_pkts]]);
    draw("chart-rtt", "smoothed RTT", "ms", series.flows, [["srtt", c => c.c]], []);
    draw("chart-queue", "bottleneck queue" + queueCounts(series.queues), "packets", series.queues,
         [["backlog", c => c.a]], []);
  }
  // the shown run's checks (they may come before its traffic, or all at once in a replay)
  const list = document.getElementById("checks");
  list.innerHTML = "";
  for (const c of state.checksByRun[state.run] || []) {
    const li = document.createElement("li");
    li.className = c.ok ? "ok" : "off";
    li.textContent = c.name + ": " + c.detail;
    list.appendChild(li);
  }
  if (state.claims) {
    document.getElementById("claims").hidden = document.getElementById("claims-title").hidden = false;
    // a verdict read before the last run is a look at the data, not the session's decision (which is
    // made once, at the end, at its alpha): said so until every run is in
    const done = state.progress && state.progress.finished;
    document.getElementById("claims-title").textContent = done ? "Claims: the session's verdicts"
      : "Claims over the runs so far (interim: the verdict is the report's, once every run is in)";
    const rows = document.querySelector("#claims tbody");
    rows.innerHTML = "";
    for (const c of state.claims) {
      const tr = document.createElement("tr");
      const sign = v => (v == null ? "?" : (v > 0 ? "+" : "") + v + " %");
      const effect = c.effect_pct == null ? "" : sign(c.effect_pct) + (c.low_pct == null ? "" : " (" + sign(c.low_pct) + " to " + sign(c.high_pct) + ")");
      for (const text of [c.id, c.verdict, effect]) {
        const td = document.createElement("td"); td.textContent = text; tr.appendChild(td);
      }
      rows.appendChild(tr);
    }
  }
  const body = document.querySelector("#runs tbody");
  body.innerHTML = "";
  for (const [run, info] of Object.entries(state.runs)) {
    const tr = document.createElement("tr");
    const goodput = info.goodput_mbit ? Object.values(info.goodput_mbit).map(v => v == null ? "-" : v.toFixed(3)).join(" / ") : "";
    const status = info.status + (info.trustworthy === false ? " (untrustworthy)" : "");
    if (info.trustworthy === false) tr.className = "untrusted";
    for (const text of [run, status, goodput]) {
      const td = document.createElement("td"); td.textContent = text; tr.appendChild(td);
    }
    body.appendChild(tr);
  }
}

// each queue's drops and ECN marks in this run (its counters count since the qdisc was made: a kept
// network's earlier runs are taken off)
function queueCounts(queues) {
  const parts = [];
  for (const [link, c] of Object.entries(queues)) {
    const delta = v => (v.length && v[0] != null && v[v.length - 1] != null ? v[v.length - 1] - v[0] : null);
    const drops = delta(c.b), marks = delta(c.c);
    parts.push(link + ": " + (drops == null ? "-" : drops) + " dropped" + (marks == null ? "" : ", " + marks + " marked"));
  }
  return parts.length ? " (" + parts.join("; ") + ")" : "";
}

function tickProgress() {
  const p = state.progress;
  if (!p) return;
  const left = Math.max(0, p.eta_s - (Date.now() - state.progressAt) / 1000);
  document.getElementById("bar").style.width = (p.total ? 100 * p.done / p.total : 0) + "%";
  const now = p.running ? " - now " + p.running : "";
  const eta = p.finished ? " - finished" : " - about " + (left / 60).toFixed(1) + " min left";
  document.getElementById("progress-text").textContent = p.done + " of " + p.total + " runs done" + now + eta;
}

const source = new EventSource("events" + window.location.search);
source.onmessage = m => onRecord(JSON.parse(m.data));
source.addEventListener("end", () => { state.ended = true; source.close(); dirty = true; });
setInterval(redraw, REDRAW_MS);
