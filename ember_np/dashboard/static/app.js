// ember-np dashboard: polls /api/runs every 2 s (?refresh=SECONDS in the page's
// address sets another period, 0.1 to 3600 s), fetches the series of the
// ticked runs (again only while they train or change: only the rows appended
// since its cursor, page by page) and draws SVG charts.
// Selection and zoom live in `state` (and the selection in the URL hash), so
// a refresh redraws without touching them.
"use strict";

const REFRESH_MS = refreshPeriod(new URLSearchParams(window.location.search).get("refresh"));
const PAGES_PER_FETCH = 64;  // pages of one series fetched before drawing (the rest: next refresh)
const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                 "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"];
const SVG = "http://www.w3.org/2000/svg";
const CHARTS = [
  {id: "reward", title: "Episode reward", note: "raw and smoothed; multi-seed: IQM, 95% CI"},
  {id: "eval", title: "Eval reward", note: "mean greedy reward; multi-seed: IQM, 95% CI"},
  {id: "length", title: "Episode length", note: "smoothed"},
  {id: "epsilon", title: "Epsilon", note: ""},
  {id: "loss", title: "Loss", note: "latest loss at each episode end: raw and smoothed"},
];

const state = {
  runs: [],            // summaries from /api/runs
  selected: new Set(), // run ids ticked by the user
  series: {},          // run id -> series merged from /api/series pages
  seenUpdate: {},      // run id -> last_update of the series we hold
  zoom: null,          // [x0, x1] in env steps, or null for everything
  smooth: 20,
  colors: {},
  touched: false,      // the user has changed the selection
};
// For tests and the curious: what each chart last drew.
window.__dashboard = {state, plotted: {}, renders: 0, refreshes: 0, errors: 0,
                      refreshMs: REFRESH_MS};

// The polling period in ms: ?refresh=SECONDS, clamped to 0.1..3600 s; 2 s when absent
// or not a number.
function refreshPeriod(seconds) {
  const s = seconds === null || seconds.trim() === "" ? NaN : Number(seconds);
  if (!Number.isFinite(s)) return 2000;
  return Math.round(1000 * Math.min(3600, Math.max(0.1, s)));
}

function colorOf(id) {
  if (!(id in state.colors)) {
    state.colors[id] = PALETTE[Object.keys(state.colors).length % PALETTE.length];
  }
  return state.colors[id];
}

function el(tag, attrs, parent) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

// Mean of the last `w` values at each index (fewer at the start); nulls skipped.
function movingMean(xs, ys, w) {
  const outX = [], outY = [], win = [];
  let sum = 0;
  for (let i = 0; i < ys.length; i++) {
    if (ys[i] === null) continue;
    win.push(ys[i]); sum += ys[i];
    if (win.length > w) sum -= win.shift();
    outX.push(xs[i]); outY.push(sum / win.length);
  }
  return [outX, outY];
}

function pairs(xs, ys) {
  const px = [], py = [];
  for (let i = 0; i < ys.length; i++) if (ys[i] !== null) { px.push(xs[i]); py.push(ys[i]); }
  return [px, py];
}

// Evaluation points come in the order their step first appears in the log: draw them by step.
function pairsByX(xs, ys) {
  const order = [...xs.keys()].filter(i => ys[i] !== null).sort((a, b) => xs[a] - xs[b]);
  return [order.map(i => xs[i]), order.map(i => ys[i])];
}

// -- traces: what each chart shows for the selected runs ----------------------------

function traces() {
  const out = Object.fromEntries(CHARTS.map(c => [c.id, []]));
  for (const run of state.runs) {
    if (!state.selected.has(run.id)) continue;
    const s = state.series[run.id];
    if (!s) continue;
    const color = colorOf(run.id);
    const multi = s.multi_seed;
    for (const m of s.members) {
      const t = m.train, tag = {run: run.id, seed: m.seed, color};
      if (!multi) {
        const [rx, ry] = pairs(t.steps, t.reward);
        out.reward.push({...tag, kind: "raw", x: rx, y: ry, width: 0.8, opacity: 0.3});
        const [sx, sy] = movingMean(t.steps, t.reward, state.smooth);
        out.reward.push({...tag, kind: "smoothed", x: sx, y: sy, width: 2});
        const [ex, ey] = pairsByX(m.eval.steps, m.eval.reward);
        out.eval.push({...tag, kind: "eval", x: ex, y: ey, width: 1.5, dots: true});
      }
      const thin = multi ? 1 : 1.5, op = multi ? 0.55 : 1;
      const [lx, ly] = movingMean(t.steps, t.length, state.smooth);
      out.length.push({...tag, kind: "smoothed", x: lx, y: ly, width: thin, opacity: op});
      const [px, py] = pairs(t.steps, t.epsilon);
      out.epsilon.push({...tag, kind: "epsilon", x: px, y: py, width: thin, opacity: op});
      if (!multi) {
        const [qx, qy] = pairs(t.steps, t.loss);
        out.loss.push({...tag, kind: "loss", x: qx, y: qy, width: 0.8, opacity: 0.3});
      }
      const [mx, my] = movingMean(t.steps, t.loss, state.smooth);
      out.loss.push({...tag, kind: "smoothed", x: mx, y: my, width: thin, opacity: op});
    }
    if (multi && s.iqm) {
      for (const [chart, curve] of [["reward", s.iqm.train], ["eval", s.iqm.eval]]) {
        if (!curve) continue;
        const tag = {run: run.id, seed: null, color};
        out[chart].push({...tag, kind: "band", x: curve.steps, lo: curve.lo, hi: curve.hi,
                         y: curve.iqm});
        out[chart].push({...tag, kind: "iqm", x: curve.steps, y: curve.iqm, width: 2,
                         dots: chart === "eval"});
      }
    }
  }
  return out;
}

// -- drawing ---------------------------------------------------------------------------

function niceTicks(lo, hi, count) {
  const span = hi - lo;
  if (!(span > 0)) return [lo];
  const step0 = span / count, mag = Math.pow(10, Math.floor(Math.log10(step0)));
  const step = [1, 2, 5, 10].map(k => k * mag).find(s => span / s <= count) || 10 * mag;
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    ticks.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  }
  return ticks;
}

function fmt(v) {
  const a = Math.abs(v);
  if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
  if (a >= 10 || v === 0) return v.toFixed(0);
  if (a >= 1) return v.toFixed(1);
  if (a >= 0.01) return v.toFixed(2);
  return v.toExponential(0);
}

function xDomain(all) {
  if (state.zoom) return state.zoom;
  let lo = Infinity, hi = -Infinity;
  for (const list of Object.values(all)) {
    for (const t of list) {
      if (t.x.length) { lo = Math.min(lo, t.x[0]); hi = Math.max(hi, t.x[t.x.length - 1]); }
    }
  }
  if (!isFinite(lo)) return [0, 1];
  return lo === hi ? [lo - 1, hi + 1] : [lo, hi];
}

function yDomain(list, x0, x1) {
  let lo = Infinity, hi = -Infinity;
  for (const t of list) {
    const ys = t.kind === "band" ? [...t.lo, ...t.hi] : t.y;
    const xs = t.kind === "band" ? [...t.x, ...t.x] : t.x;
    for (let i = 0; i < ys.length; i++) {
      if (xs[i] < x0 || xs[i] > x1 || ys[i] === null) continue;
      lo = Math.min(lo, ys[i]); hi = Math.max(hi, ys[i]);
    }
  }
  if (!isFinite(lo)) return [0, 1];
  if (lo === hi) return [lo - 1, hi + 1];
  const pad = (hi - lo) * 0.05;
  return [lo - pad, hi + pad];
}

function pathOf(xs, ys, sx, sy) {
  let d = "";
  for (let i = 0; i < xs.length; i++) {
    d += (i ? "L" : "M") + sx(xs[i]).toFixed(1) + "," + sy(ys[i]).toFixed(1);
  }
  return d;
}

function drawChart(spec, list, xd, box) {
  const W = Math.max(box.clientWidth - 16, 300), H = 230;
  const m = {l: 48, r: 10, t: 8, b: 24};
  const svg = el("svg", {viewBox: `0 0 ${W} ${H}`, height: H, "data-chart": spec.id});
  const [x0, x1] = xd, [y0, y1] = yDomain(list, x0, x1);
  const sx = x => m.l + (x - x0) / (x1 - x0) * (W - m.l - m.r);
  const sy = y => H - m.b - (y - y0) / (y1 - y0) * (H - m.t - m.b);
  const axis = el("g", {class: "axis"}, svg);
  for (const v of niceTicks(y0, y1, 5)) {
    el("line", {x1: m.l, x2: W - m.r, y1: sy(v), y2: sy(v)}, axis);
    el("text", {x: m.l - 4, y: sy(v) + 3, "text-anchor": "end"}, axis).textContent = fmt(v);
  }
  for (const v of niceTicks(x0, x1, 6)) {
    el("text", {x: sx(v), y: H - 8, "text-anchor": "middle"}, axis).textContent = fmt(v);
  }
  el("clipPath", {id: "clip-" + spec.id}, svg).appendChild(
    el("rect", {x: m.l, y: m.t, width: W - m.l - m.r, height: H - m.t - m.b}));
  const plot = el("g", {"clip-path": `url(#clip-${spec.id})`}, svg);
  const drawn = [];
  for (const t of list) {
    const common = {"data-run": t.run, "data-kind": t.kind};
    if (t.seed !== null) common["data-seed"] = t.seed;
    if (t.kind === "band") {
      const top = pathOf(t.x, t.hi, sx, sy);
      const back = pathOf([...t.x].reverse(), [...t.lo].reverse(), sx, sy).replace(/^M/, "L");
      el("path", {...common, d: top + back + "Z", fill: t.color, "fill-opacity": 0.18,
                  stroke: "none"}, plot);
      drawn.push({run: t.run, seed: t.seed, kind: t.kind, x: t.x, lo: t.lo, hi: t.hi});
      continue;
    }
    el("path", {...common, d: pathOf(t.x, t.y, sx, sy), fill: "none", stroke: t.color,
                "stroke-width": t.width, "stroke-opacity": t.opacity ?? 1,
                "stroke-linejoin": "round"}, plot);
    if (t.dots) {
      for (let i = 0; i < t.x.length; i++) {
        const c = el("circle", {...common, cx: sx(t.x[i]), cy: sy(t.y[i]), r: 3,
                                fill: t.color, "data-x": t.x[i], "data-y": t.y[i]}, plot);
        el("title", {}, c).textContent = `${t.run}: ${fmt(t.y[i])} at step ${t.x[i]}`;
      }
    }
    drawn.push({run: t.run, seed: t.seed, kind: t.kind, x: t.x, y: t.y});
  }
  if (!list.length) {
    el("text", {x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty"}, svg)
      .textContent = state.selected.size ? "no data yet" : "tick a run on the left";
  }
  window.__dashboard.plotted[spec.id] = drawn;
  addZoom(svg, m, W, H, x0, x1);
  return svg;
}

function addZoom(svg, m, W, H, x0, x1) {
  let start = null, rect = null;
  const toX = ev => {
    const r = svg.getBoundingClientRect();
    const px = (ev.clientX - r.left) * W / r.width;
    return Math.min(Math.max(px, m.l), W - m.r);
  };
  const toData = px => x0 + (px - m.l) / (W - m.l - m.r) * (x1 - x0);
  svg.addEventListener("mousedown", ev => {
    start = toX(ev);
    rect = el("rect", {class: "zoombox", x: start, y: m.t, width: 0, height: H - m.t - m.b}, svg);
  });
  svg.addEventListener("mousemove", ev => {
    if (start === null) return;
    const px = toX(ev);
    rect.setAttribute("x", Math.min(px, start));
    rect.setAttribute("width", Math.abs(px - start));
  });
  const finish = ev => {
    if (start === null) return;
    const px = toX(ev), a = Math.min(px, start), b = Math.max(px, start);
    start = null;
    rect.remove();
    if (b - a > 4) { state.zoom = [toData(a), toData(b)]; render(); }
  };
  svg.addEventListener("mouseup", finish);
  svg.addEventListener("mouseleave", finish);
  svg.addEventListener("dblclick", () => { state.zoom = null; render(); });
}

function render() {
  const main = document.getElementById("charts");
  const all = traces(), xd = xDomain(all);
  if (!main.children.length) {
    for (const spec of CHARTS) {
      const box = document.createElement("section");
      box.className = "chart";
      box.id = "chart-" + spec.id;
      box.innerHTML = `<h2>${spec.title}<small>${spec.note}</small></h2>`;
      main.appendChild(box);
    }
  }
  for (const spec of CHARTS) {
    const box = document.getElementById("chart-" + spec.id);
    const svg = drawChart(spec, all[spec.id], xd, box);
    const old = box.querySelector("svg");
    if (old) old.replaceWith(svg); else box.appendChild(svg);
  }
  document.getElementById("zoom").textContent = state.zoom
    ? `zoomed to steps ${fmt(state.zoom[0])}–${fmt(state.zoom[1])} · double-click a chart to zoom out`
    : "";
  window.__dashboard.renders++;
}

// -- the run list ------------------------------------------------------------------

function renderList() {
  const ul = document.getElementById("runs");
  ul.textContent = "";
  for (const run of state.runs) {
    const li = document.createElement("li");
    li.dataset.run = run.id;
    const box = document.createElement("input");
    box.type = "checkbox";
    box.checked = state.selected.has(run.id);
    box.addEventListener("change", () => toggle(run.id, box.checked));
    li.addEventListener("click", ev => {
      if (ev.target !== box) { box.checked = !box.checked; toggle(run.id, box.checked); }
    });
    const sw = document.createElement("span");
    sw.className = "swatch";
    sw.style.background = colorOf(run.id);
    const text = document.createElement("div");
    const seeds = run.seeds ? `${run.seeds.length} seeds · ` : "";
    const best = run.best_eval === null ? "" : ` · best eval ${fmt(run.best_eval)}`;
    text.innerHTML = `<div class="run-name"></div><div class="run-meta"></div>`;
    text.firstChild.textContent = `${run.name}/${run.version}/${run.run_id}`;
    if (run.training) {
      const dot = document.createElement("span");
      dot.className = "live";
      dot.title = "still training";
      text.firstChild.appendChild(dot);
    }
    text.lastChild.textContent =
      `${seeds}${run.total_steps.toLocaleString()} steps · ${run.episodes} episodes${best}`;
    li.append(box, sw, text);
    ul.appendChild(li);
  }
}

function saveSelection() {
  const ids = [...state.selected].map(encodeURIComponent).join(",");
  history.replaceState(null, "", ids ? "#runs=" + ids : location.pathname);
}

// The selection in the URL; an id that is not valid percent-encoding (a hand-edited
// or truncated link, "#runs=%E0%A4%A") is skipped, not fatal.
function loadSelection() {
  const m = location.hash.match(/^#runs=(.*)$/);
  if (!m) return;
  for (const part of m[1].split(",")) {
    let id = "";
    try { id = decodeURIComponent(part); } catch (err) { continue; }
    if (id) state.selected.add(id);
  }
  state.touched = state.selected.size > 0;  // none readable: show the newest run, as with no hash
}

async function toggle(id, on) {
  state.touched = true;
  if (on) state.selected.add(id); else state.selected.delete(id);
  saveSelection();
  try {
    if (on && !state.series[id]) await fetchSeries(id);
  } catch (err) {
    window.__dashboard.errors++;
    document.getElementById("status").textContent = "cannot fetch " + id + ": " + err.message;
  }
  render();
}

// -- fetching ----------------------------------------------------------------------

async function getJSON(url) {
  const r = await fetch(url, {cache: "no-store"});
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return r.json();
}

// One page's columns into those held: rows from page.from on are replaced by the
// page's (from 0: the whole column). null when we hold fewer rows than `from`.
function mergeColumns(held, page) {
  const names = Object.keys(page).filter(k => k !== "from");
  if (!held || page.from === 0) return Object.fromEntries(names.map(k => [k, page[k]]));
  if (names.some(k => !held[k] || held[k].length < page.from)) return null;
  for (const k of names) {
    held[k].length = page.from;
    for (const v of page[k]) held[k].push(v);
  }
  return held;
}

// A page of /api/series merged into the series held (members matched by seed); null: start over.
function mergePage(held, page) {
  const old = new Map((held ? held.members : []).map(m => [String(m.seed), m]));
  const members = [];
  for (const pm of page.members) {
    const m = old.get(String(pm.seed));
    const train = mergeColumns(m && m.train, pm.train), ev = mergeColumns(m && m.eval, pm.eval);
    if (train === null || ev === null) return null;
    members.push({seed: pm.seed, train, eval: ev});
  }
  return {id: page.id, members, multi_seed: page.multi_seed, cursor: page.cursor,
          more: page.more, iqm: page.iqm !== null ? page.iqm : (held ? held.iqm : null)};
}

// Fetch what was appended to a run's logs since the cursor held (everything, the first time).
async function fetchSeries(id) {
  const run = state.runs.find(r => r.id === id);
  const seen = run ? run.last_update : null;
  let restarted = false;
  for (let n = 0; n < PAGES_PER_FETCH; n++) {
    const held = state.series[id];
    let url = "api/series?run=" + encodeURIComponent(id);
    if (held) url += "&cursor=" + encodeURIComponent(held.cursor);
    const merged = mergePage(held, await getJSON(url));
    if (merged === null) {  // rows missing here: fetch the whole series again, once
      delete state.series[id];
      if (restarted) throw new Error(`series of ${id} does not line up`);
      restarted = true;
      continue;
    }
    state.series[id] = merged;
    if (!merged.more) break;
  }
  state.seenUpdate[id] = seen;
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    const data = await getJSON("api/runs");
    document.getElementById("root").textContent = data.root;
    state.runs = data.runs;
    const ids = new Set(state.runs.map(r => r.id));
    if (!state.touched && state.selected.size === 0 && state.runs.length) {
      state.selected.add(state.runs[0].id); // the newest run, until the user picks
    }
    for (const id of [...state.selected]) if (!ids.has(id)) delete state.series[id];
    const stale = state.runs.filter(r => state.selected.has(r.id) && (!state.series[r.id] ||
      state.series[r.id].more || r.training || state.seenUpdate[r.id] !== r.last_update));
    await Promise.all(stale.map(r => fetchSeries(r.id)));
    renderList();
    if (stale.length || !window.__dashboard.renders) render();
    const live = state.runs.filter(r => r.training).length;
    const n = state.runs.length;
    status.textContent = `${n} run${n === 1 ? "" : "s"}, ${live} training · updated ` +
      new Date().toLocaleTimeString();
  } catch (err) {
    window.__dashboard.errors++;
    status.textContent = "cannot reach the server: " + err.message;
  } finally {  // whatever failed, the next refresh comes
    window.__dashboard.refreshes++;
    setTimeout(refresh, REFRESH_MS);
  }
}

document.getElementById("smooth").addEventListener("change", ev => {
  const w = parseInt(ev.target.value, 10);
  state.smooth = w >= 1 ? w : 1;
  ev.target.value = state.smooth;
  render();
});
window.addEventListener("resize", () => render());
try {
  loadSelection();
} finally {
  refresh();
}
