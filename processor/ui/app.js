// The statistics page: reads the JSON read surface of whichever server serves it (a worker or
// `recurrence serve`) and draws it. No framework, nothing fetched from elsewhere; every value from
// the server is set as text, never parsed as HTML.
"use strict";

const FIELDS = ["selected", "recurred", "avoided", "unknown", "unlinked_handoff_citations", "needing_review"];
const TOP = 50;          // top_revisions asked per scope (the needing-review list is their head)
const CARDS = 20;        // revisions of the chosen scope whose verdict history is drawn

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value;
    else if (name.startsWith("data-")) node.setAttribute(name, value);
    else node[name] = value;
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

// The server's bearer token, when it has one (RECURRENCE_HTTP_TOKEN): taken from the URL fragment
// (/ui#token=...), which never leaves the browser, and removed from the address bar; else asked for once,
// when a request is refused (401). Kept for this tab only (sessionStorage) and sent with every request.
const TOKEN_KEY = "recurrence-token";
let asking = null; // the one question in flight, shared by every request refused at the same time

function takeTokenFromFragment() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  const token = fragment.get("token");
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  fragment.delete("token");
  const rest = fragment.toString();
  history.replaceState(null, "", location.pathname + location.search + (rest ? `#${rest}` : ""));
}

function askToken(refused) {
  if (sessionStorage.getItem(TOKEN_KEY) !== refused) return Promise.resolve(true); // already asked and answered
  if (!asking) {
    asking = new Promise((resolve) => setTimeout(() => {
      const entered = window.prompt("This server asks for its access token (RECURRENCE_HTTP_TOKEN):");
      if (entered) sessionStorage.setItem(TOKEN_KEY, entered.trim());
      asking = null;
      resolve(Boolean(entered));
    }, 0));
  }
  return asking;
}

async function api(path, accept) {
  for (;;) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const headers = { Accept: accept };
    if (token) headers.Authorization = `Bearer ${token}`;
    const response = await fetch(path, { headers });
    if (response.status !== 401 || !(await askToken(token))) return response;
  }
}

async function getJSON(path) {
  const response = await api(path, "application/json");
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).error || detail; } catch (_) { /* not JSON */ }
    throw new Error(`${path}: ${response.status} ${detail}`);
  }
  return response.json();
}

function refText(ref) { return `${ref.family}/${ref.artifact_id}@${ref.revision}`; }

function explainPath(id, scope, format) {
  const query = new URLSearchParams();
  if (scope) query.set("scope", scope);
  if (format) query.set("format", format);
  return `/explain/${encodeURIComponent(id)}?${query}`;
}

function explainLink(id, scope) {
  const link = el("a", { href: explainPath(id, scope, "text"), class: "explain" }, "explain");
  link.addEventListener("click", async (event) => {
    event.preventDefault();
    const box = document.getElementById("explanation-box");
    const pre = document.getElementById("explanation");
    document.getElementById("explanation-id").textContent = id + (scope ? ` in ${scope}` : "");
    box.hidden = false;
    pre.textContent = "loading…";
    try {
      const response = await api(explainPath(id, scope, "text"), "text/plain");
      pre.textContent = await response.text();
    } catch (error) {
      pre.textContent = String(error);
    }
    box.scrollIntoView({ behavior: "smooth", block: "nearest" });
  });
  return link;
}

function empty(table, columns, text) {
  table.tBodies[0].append(el("tr", {}, el("td", { colSpan: columns, class: "empty" }, text)));
}

// The terminal streak after each verdict, over the verdicts' journal positions.
function sparkline(history) {
  const svgNS = "http://www.w3.org/2000/svg";
  const width = 180, height = 30, pad = 4;
  const svg = document.createElementNS(svgNS, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  if (!history.length) return svg;
  let streak = 0;
  const points = history.map(([position, event]) => {
    streak = event === "recurred" ? streak + 1 : 0;
    return { position, event, streak };
  });
  const first = points[0].position, last = points[points.length - 1].position;
  const most = Math.max(1, ...points.map((p) => p.streak));
  const x = (p) => pad + (last === first ? (width - 2 * pad) / 2 : ((p.position - first) / (last - first)) * (width - 2 * pad));
  const y = (p) => height - pad - (p.streak / most) * (height - 2 * pad);
  const line = document.createElementNS(svgNS, "polyline");
  line.setAttribute("points", points.map((p) => `${x(p).toFixed(1)},${y(p).toFixed(1)}`).join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", "#8a93a8");
  line.setAttribute("stroke-width", "1.2");
  svg.append(line);
  for (const p of points) {
    const dot = document.createElementNS(svgNS, "circle");
    dot.setAttribute("cx", x(p).toFixed(1));
    dot.setAttribute("cy", y(p).toFixed(1));
    dot.setAttribute("r", "2.6");
    dot.setAttribute("fill", p.event === "recurred" ? "#c8372d" : "#2f8a4c");
    const title = document.createElementNS(svgNS, "title");
    title.textContent = `position ${p.position}: ${p.event}, streak ${p.streak}`;
    dot.append(title);
    svg.append(dot);
  }
  svg.setAttribute("data-verdicts", points.map((p) => (p.event === "recurred" ? "R" : "a")).join(""));
  return svg;
}

function renderTotals(stats) {
  const box = document.getElementById("totals");
  box.replaceChildren();
  const labels = { unlinked_handoff_citations: "unlinked citations", needing_review: "needing review" };
  box.append(el("div", { class: "tile" }, el("div", { class: "value", "data-total": "scopes" }, stats.length),
    el("div", { class: "label" }, "scopes")));
  for (const field of FIELDS) {
    const total = stats.reduce((sum, s) => sum + s.recurrence[field], 0);
    box.append(el("div", { class: "tile" }, el("div", { class: "value", "data-total": field }, total),
      el("div", { class: "label" }, labels[field] || field)));
  }
}

function renderScopes(stats, chosen, choose) {
  const table = document.getElementById("scopes");
  table.tBodies[0].replaceChildren();
  if (!stats.length) return empty(table, 7, "no scope has an accepted entry yet");
  for (const s of stats) {
    const row = el("tr", { class: "scope-row" + (s.scope_id === chosen ? " chosen" : ""), "data-scope": s.scope_id },
      el("td", { class: "mono" }, s.scope_id));
    for (const field of FIELDS) {
      row.append(el("td", { class: "num", "data-scope": s.scope_id, "data-field": field }, s.recurrence[field]));
    }
    row.addEventListener("click", () => choose(s.scope_id));
    table.tBodies[0].append(row);
  }
}

async function renderTop(scope) {
  const table = document.getElementById("top");
  document.getElementById("top-scope").textContent = scope ? `in ${scope.scope_id}` : "";
  table.tBodies[0].replaceChildren();
  const revisions = scope ? scope.recurrence.top_revisions.slice(0, CARDS) : [];
  if (!revisions.length) return empty(table, 5, "no revision of this scope has recurred");
  const rows = revisions.map((r) => {
    const id = refText(r.artifact_ref);
    const spark = el("td", { "data-spark": id }, "…");
    table.tBodies[0].append(el("tr", { "data-revision": id },
      el("td", { class: "mono" }, id), el("td", { class: "mono" }, r.signature_key),
      el("td", { class: "num", "data-field": "streak" }, r.terminal_recurred_streak), spark,
      el("td", {}, explainLink(id, scope.scope_id))));
    return { id, spark };
  });
  await Promise.all(rows.map(async ({ id, spark }) => {
    try {
      const card = (await getJSON(explainPath(id, scope.scope_id, "json"))).cards[0];
      spark.replaceChildren(sparkline(card.history || []));
    } catch (error) {
      spark.textContent = "not available";
    }
  }));
}

function renderReview(stats) {
  const table = document.getElementById("review");
  table.tBodies[0].replaceChildren();
  let shown = 0;
  for (const s of stats) {
    // top_revisions is ordered by streak, so the ones needing review come first.
    const needing = s.recurrence.top_revisions.slice(0, s.recurrence.needing_review);
    for (const r of needing) {
      const id = refText(r.artifact_ref);
      table.tBodies[0].append(el("tr", { "data-review": `${s.scope_id} ${id}` },
        el("td", { class: "mono" }, s.scope_id), el("td", { class: "mono" }, id),
        el("td", { class: "mono" }, r.signature_key), el("td", { class: "num" }, r.terminal_recurred_streak),
        el("td", {}, explainLink(id, s.scope_id))));
      shown += 1;
    }
    const more = s.recurrence.needing_review - needing.length;
    if (more > 0) empty(table, 5, `${s.scope_id}: ${more} more than listed`);
  }
  if (!shown) empty(table, 5, "no revision needs review");
}

function renderDeadLetters(body) {
  const table = document.getElementById("dead-letters");
  table.tBodies[0].replaceChildren();
  document.getElementById("dead-letters-total").textContent = body.total;
  const codes = Object.entries(body.by_code);
  if (!codes.length) return empty(table, 2, "none");
  for (const [code, count] of codes) {
    table.tBodies[0].append(el("tr", {}, el("td", { class: "mono" }, code),
      el("td", { class: "num", "data-code": code }, count)));
  }
}

function renderPatterns(body) {
  const table = document.getElementById("patterns");
  table.tBodies[0].replaceChildren();
  if (!body.patterns.length) return empty(table, 4, `no signature has recurred in ${body.min_scopes} scopes yet`);
  for (const p of body.patterns) {
    table.tBodies[0].append(el("tr", { "data-pattern": p.signature_key },
      el("td", { class: "mono" }, p.signature_key),
      el("td", { class: "num", title: p.scopes.join(", ") }, p.scope_count + (p.more_than_listed ? "+" : "")),
      el("td", { class: "num" }, p.recurrences),
      el("td", {}, p.suggested ? "suggested" : `below ${p.min_scopes} scopes`)));
  }
}

// The review-threshold what-if (`/tune`, as `recurrence tune` counts it): per threshold, the review
// proposals a replay would write and the premature flags (streaks an avoided verdict later ended), as
// grouped bars; the threshold the state runs with is marked.
const SVG = "http://www.w3.org/2000/svg";

function svgEl(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function niceStep(most) {
  const rough = Math.max(1, most) / 4;
  const power = 10 ** Math.floor(Math.log10(rough));
  return Math.max(1, [1, 2, 5, 10].map((m) => m * power).find((step) => step >= rough));  // counts: whole ticks
}

function tuneChart(body) {
  const rows = body.thresholds;
  const width = 640, height = 280, left = 48, right = 8, top = 26, bottom = 40;
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
    "aria-label": "review proposals and premature flags per review threshold" });
  const most = Math.max(1, ...rows.flatMap((r) => [r.review_proposals, r.flags_then_avoided]));
  const step = niceStep(most);
  const ceiling = Math.ceil(most / step) * step;
  const plotW = width - left - right, plotH = height - top - bottom;
  const y = (value) => top + plotH - (value / ceiling) * plotH;
  for (let tick = 0; tick <= ceiling; tick += step) {
    svg.append(svgEl("line", { class: "axis", x1: left, x2: width - right, y1: y(tick), y2: y(tick) }));
    svg.append(svgEl("text", { class: "tick", x: left - 6, y: y(tick) + 4, "text-anchor": "end" },
      tick.toLocaleString()));
  }
  const band = plotW / Math.max(1, rows.length);
  const bar = Math.min(26, band * 0.36);
  rows.forEach((row, index) => {
    const middle = left + band * index + band / 2;
    if (row.threshold === body.review_threshold) {
      // Behind the bars: the band of the threshold the state runs with.
      svg.append(svgEl("rect", { class: "configured", x: (middle - band / 2 + 2).toFixed(1), y: top - 12,
        width: (band - 4).toFixed(1), height: plotH + 12, rx: 3, "data-configured": row.threshold }));
      svg.append(svgEl("text", { class: "configured-label", x: middle, y: top - 2, "text-anchor": "middle" },
        `configured: ${row.threshold}`));
    }
    [["review_proposals", "proposals", -bar], ["flags_then_avoided", "premature", 0]].forEach(([field, kind, dx]) => {
      const value = row[field];
      const rect = svgEl("rect", { class: kind, x: (middle + dx).toFixed(1), y: y(value).toFixed(1), width: bar.toFixed(1),
        height: (top + plotH - y(value)).toFixed(1), "data-threshold": row.threshold, "data-series": field,
        "data-value": value });
      rect.append(svgEl("title", {}, `threshold ${row.threshold}: ${value.toLocaleString()} ` +
        (field === "review_proposals" ? "review proposals" : "premature flags")));
      svg.append(rect);
    });
    svg.append(svgEl("text", { class: "tick", x: middle, y: height - bottom + 16, "text-anchor": "middle" },
      row.threshold));
  });
  svg.append(svgEl("text", { class: "tick", x: left + plotW / 2, y: height - 6, "text-anchor": "middle" },
    "review threshold (consecutive recurrences)"));
  return svg;
}

function renderTune(body) {
  document.getElementById("tune-configured").textContent = `the state runs at ${body.review_threshold}`;
  document.getElementById("tune-chart").replaceChildren(tuneChart(body));
  const table = document.getElementById("tune-table");
  table.tBodies[0].replaceChildren();
  for (const row of body.thresholds) {
    const share = row.flags ? `${((100 * row.flags_then_avoided) / row.flags).toFixed(1)}%` : "–";
    const tr = el("tr", { "data-tune": row.threshold, class: row.threshold === body.review_threshold ? "configured" : "" },
      el("td", { class: "num" }, row.threshold));
    for (const field of ["review_proposals", "needing_review", "flags", "flags_then_avoided"]) {
      tr.append(el("td", { class: "num", "data-field": field }, row[field].toLocaleString()));
    }
    tr.append(el("td", { class: "num", "data-field": "premature" }, share));
    table.tBodies[0].append(tr);
  }
  const note = document.getElementById("tune-note");
  note.textContent = body.incomplete_scopes.length
    ? `${body.incomplete_scopes.length} scopes were replayed before these counters were kept and count short ` +
      `(${body.incomplete_scopes.slice(0, 5).join(", ")}${body.incomplete_scopes.length > 5 ? ", …" : ""}); ` +
      "rebuild the state to include them."
    : "flags: times a streak reached the threshold, any repair surface, head or not (= needing review + premature " +
      "flags); review proposals: only experience_content records, on their head revision.";
}

async function load() {
  const status = document.getElementById("status");
  try {
    const [stats, deadLetters, patterns, tune] = await Promise.all([
      getJSON(`/statistics?top=${TOP}`), getJSON("/dead-letters"), getJSON("/patterns"), getJSON("/tune"),
    ]);
    let chosen = null;
    const choose = async (scopeId) => {
      chosen = stats.find((s) => s.scope_id === scopeId) || null;
      renderScopes(stats, scopeId, choose);
      await renderTop(chosen);
    };
    renderTotals(stats);
    renderReview(stats);
    renderDeadLetters(deadLetters);
    renderPatterns(patterns);
    renderTune(tune);
    const busiest = [...stats].sort((a, b) => b.recurrence.recurred - a.recurrence.recurred)[0];
    await choose(busiest ? busiest.scope_id : null);
    status.textContent = `${stats.length} scopes · loaded ${new Date().toLocaleTimeString()} from ${location.host}`;
    document.body.setAttribute("data-loaded", "true");
  } catch (error) {
    status.textContent = String(error.message || error);
    status.className = "error";
    document.body.setAttribute("data-loaded", "error");
  }
}

takeTokenFromFragment();
load();
