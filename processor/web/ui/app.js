// The statistics page: reads the JSON read surface of whichever server serves it (a worker or
// `recurrence serve`) and draws it. No framework, nothing fetched from elsewhere; every value from
// the server is set as text, never parsed as HTML, and no style is set inline (the page's own
// style sheet only).
//
// It lives: /progress is polled every POLL_MS with If-None-Match; while the state has not moved the
// server answers 304 and nothing else is asked. When it moved, the data is fetched again and drawn
// into the same tables, keeping what the reader chose (the scope, each table's sort and filter, the
// explanations open): no reload, no flicker.
"use strict";

// The counts of a scope's RecurrenceStatistics, in the model's order, as the page names them.
const LABELS = {
  selected: "selected", recurred: "recurred", avoided: "avoided", unknown: "unknown",
  unlinked_handoff_citations: "unlinked citations", needing_review: "needing review",
};
const FIELDS = Object.keys(LABELS);
// One line each, where the word appears (RFC: "linked selections without a terminal verdict";
// "Handoff citations that cannot be joined to a Task Outcome").
const DEFINITIONS = {
  unknown: "unknown: the lesson was selected into context, but the Task Outcome showed neither its check " +
    "passing under the risky condition nor the failure again; derived, never written, and a growing share " +
    "means the verification binding never fires.",
  unlinked_handoff_citations: "unlinked citations: Handoff citations no Task Outcome can be joined to; a gap " +
    "in provenance coverage, not a selection and not a failed recall.",
};
// A large unknown share is flagged (the same rule as `recurrence stats --table`, processor/statstable.py):
// at least this share of the selections ended unknown, once there are this many selections.
const UNKNOWN_FLAG_SHARE = 0.5;
const UNKNOWN_FLAG_MIN_SELECTED = 20;
const TOP = 50;          // top_revisions asked per scope (the needing-review list is their head)
const CARDS = 20;        // revisions of the chosen scope whose verdict history is drawn
const POLL_MS = 1000;    // how often /progress is asked whether the state moved (a 304 while it has not)
const SEARCH_ROWS = 200; // signature matches listed at most

const NUMBER = new Intl.NumberFormat();
function num(value) { return value === null || value === undefined ? "–" : NUMBER.format(value); }
// "1 scope", "2 scopes" (as counted() in processor/core/tally.py).
function counted(count, noun, plural) { return `${num(count)} ${count === 1 ? noun : plural || noun + "s"}`; }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("data-") || name.startsWith("aria-") || name === "role") node.setAttribute(name, value);
    else node[name] = value;
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// The server's bearer token, when it has one (RECURRENCE_HTTP_TOKEN): taken from the URL fragment
// (/ui#token=...), which never leaves the browser, and removed from the address bar; else asked for when a
// request is refused (401). Kept for this tab only (sessionStorage) and sent with every request. A value
// that cannot be a token (the server refuses those at start: under 16 characters, spaces, anything but
// visible ASCII, which a request header cannot even carry) is never kept: the page asks instead, and a
// kept one found malformed (an earlier page) is dropped on load, so a reload asks again too.
const TOKEN_KEY = "recurrence-token";
const TOKEN_SHAPE = /^[\x21-\x7e]{16,}$/;
let asking = null;      // the one question in flight, shared by every request refused at the same time
let tokenNote = "";     // why the page asks (a malformed or refused token), shown in the question
let declined = false;   // the reader cancelled the question: not asked again until they choose to

function tokenProblem(value) {
  if (TOKEN_SHAPE.test(value)) return "";
  if (/[^\x21-\x7e]/.test(value)) {
    return "it holds spaces or characters a token never has (a token is letters, digits and punctuation)";
  }
  return `it is ${value.length} characters long, a token at least 16`;
}

function storedToken() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token === null || !tokenProblem(token)) return token;
  sessionStorage.removeItem(TOKEN_KEY);
  tokenNote = `The token this tab kept is not one (${tokenProblem(token)}).`;
  return null;
}

function takeTokenFromFragment() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  const token = fragment.get("token");
  if (token === null) return;
  const problem = tokenProblem(token);
  if (problem) tokenNote = `The token in the address is not one (${problem}).`;
  else sessionStorage.setItem(TOKEN_KEY, token);
  fragment.delete("token");
  const rest = fragment.toString();
  history.replaceState(null, "", location.pathname + location.search + (rest ? `#${rest}` : ""));
}

function askToken(refused) {
  if (storedToken() !== refused) return Promise.resolve(true); // already asked and answered
  if (declined) return Promise.resolve(false);
  if (!asking) {
    if (refused !== null) tokenNote = "The server refused the token this tab sent.";
    asking = new Promise((resolve) => setTimeout(() => {
      let entered = null;
      for (;;) {
        const question = `${tokenNote ? tokenNote + "\n" : ""}This server asks for its access token ` +
          "(RECURRENCE_HTTP_TOKEN, or the content of its --http-token-file):";
        entered = window.prompt(question);
        if (entered === null) break;
        entered = entered.trim();
        const problem = tokenProblem(entered);
        if (!problem) break;
        tokenNote = `That is not a token (${problem}).`;
      }
      if (entered === null) declined = true;
      else sessionStorage.setItem(TOKEN_KEY, entered);
      tokenNote = "";
      asking = null;
      resolve(entered !== null);
    }, 0));
  }
  return asking;
}

// After the reader cancelled the question: the status line offers to ask again.
function offerToken() {
  const status = byId("status");
  const again = el("button", { type: "button", class: "small", id: "token-again" }, "enter the token");
  again.addEventListener("click", () => {
    declined = false;
    status.replaceChildren("loading…");
    status.className = "";
    cycle();
  }, { once: true });
  status.replaceChildren("This server asks for its access token (RECURRENCE_HTTP_TOKEN).", again);
  status.className = "error";
}

// Every request of the page goes through here: the token, no HTTP cache (the page sends its own
// If-None-Match where it wants a 304), and the question for a token when the server refuses without one.
async function request(path, options) {
  for (;;) {
    const token = storedToken();
    const headers = { ...((options && options.headers) || {}) };
    if (token) headers.Authorization = `Bearer ${token}`;
    const response = await fetch(path, { cache: "no-store", ...(options || {}), headers });
    if (response.status !== 401 || !(await askToken(token))) return response;
  }
}

async function getJSON(path, answered) {
  const response = await request(path, { headers: { Accept: "application/json" } });
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).error || detail; } catch (_) { /* not JSON */ }
    throw new Error(`${path}: ${response.status} ${detail}`);
  }
  if (answered) answered(response);
  return response.json();
}

// On `serve`, a data answer names the view it was computed from (Recurrence-State: the /progress body of
// that view): the header is drawn from it, so the header and the numbers come from one read.
function stateOf(response) {
  const raw = response.headers.get("Recurrence-State");
  try { return raw ? JSON.parse(raw) : null; } catch (_) { return null; }
}

function refText(ref) { return `${ref.family}/${ref.artifact_id}@${ref.revision}`; }

function explainPath(id, scope, format) {
  const query = new URLSearchParams();
  if (scope) query.set("scope", scope);
  if (format) query.set("format", format);
  return `/explain/${encodeURIComponent(id)}?${query}`;
}

async function explanationText(id, scope) {
  const response = await request(explainPath(id, scope, "text"), { headers: { Accept: "text/plain" } });
  const text = await response.text();
  if (response.ok) return text;
  try { return `${response.status}: ${JSON.parse(text).error}`; } catch (_) { return `${response.status}: ${text}`; }
}

// -- the address: what a link to the page holds ---------------------------------------------------------
// #scope=S (the chosen scope), and #search=Q (a search) or #explain=ID (an explanation, with its scope):
// a reload, or the link sent to someone else, shows the same. The token is never part of it.

function addressParams() { return new URLSearchParams(location.hash.slice(1)); }

function setAddress(changes) {
  const params = addressParams();
  for (const [name, value] of Object.entries(changes)) {
    if (value === null || value === undefined || value === "") params.delete(name);
    else params.set(name, value);
  }
  params.delete("token");
  const hash = params.toString();
  history.replaceState(null, "", location.pathname + location.search + (hash ? `#${hash}` : ""));
}

function pageHref(params) {
  return `${location.origin}${location.pathname}#${new URLSearchParams(params)}`;
}

// An explanation's own scope (``?scope=`` of /explain) is "in", apart from the scope chosen on the page.
function explanationHref(id, scope) {
  return pageHref(scope ? { explain: id, in: scope, scope } : { explain: id });
}

function explanationLink(id, scope) {
  return el("a", { href: explanationHref(id, scope), class: "share", "data-share": "explanation",
    title: "a link to this explanation: copy it to share it (it never holds the token)" }, "link");
}

// -- tables that sort, filter and open an explanation beside a row -----------------------------------

// A column: name, label, num (right-aligned, formatted), value(row) to sort and filter by, cell(row)
// for what is shown (defaults to the value), attrs(row) for the cell's data attributes, title.
class Grid {
  constructor(table, options) {
    this.table = table;
    this.columns = options.columns;
    this.key = options.key;                    // row -> a stable key (sort, filter and open rows survive a refresh)
    this.rowAttrs = options.rowAttrs || (() => ({}));
    this.explain = options.explain || null;    // row -> {id, scope} of its explanation
    this.detail = options.detail || null;      // row -> a Node (or a promise of one) opened instead of a text
    this.openLabel = options.openLabel || (this.detail ? "open" : "explain");
    this.onRow = options.onRow || null;        // a click on the row (not on a link or button)
    this.chosen = options.chosen || (() => false);
    this.emptyText = options.empty || "nothing to show";
    this.sort = options.sort || null;          // {name, descending}
    this.filter = "";
    this.rows = [];
    this.open = new Map();                     // key -> the explanation's text or detail node (null: loading)
    this.basis = new Map();                    // key -> the row a detail was made from (made again when it changes)
    this.count = options.count || null;        // an element that says how many rows are shown
    this.head();
    if (options.filterInput) {
      options.filterInput.addEventListener("input", () => {
        this.filter = options.filterInput.value.trim().toLowerCase();
        this.render();
      });
    }
  }

  head() {
    const row = el("tr");
    for (const column of this.columns) {
      const th = el("th", { class: column.num ? "num sortable" : "sortable", title: column.title, scope: "col",
        "data-sort": column.name });
      const button = el("button", { type: "button", class: column.defined ? "sort defined" : "sort" }, column.label);
      button.addEventListener("click", () => {
        const same = this.sort && this.sort.name === column.name;
        this.sort = { name: column.name, descending: same ? !this.sort.descending : Boolean(column.num) };
        this.render();
      });
      th.append(button);
      row.append(th);
    }
    if (this.explain || this.detail) row.append(el("th", { class: "explain-col" }, ""));
    this.table.tHead.replaceChildren(row);
  }

  setRows(rows) {
    this.rows = rows;
    const keys = new Set(rows.map((r) => this.key(r)));
    for (const key of [...this.open.keys()]) if (!keys.has(key)) this.open.delete(key);
    this.render();
    if (!this.detail) return;
    for (const row of rows) {  // an open detail whose row changed (a live update) is made again
      const key = this.key(row);
      if (this.open.has(key) && this.basis.get(key) !== JSON.stringify(row)) this.load(row, key);
    }
  }

  // What an opened row holds: the row's detail node, or its explanation's text.
  async load(row, key) {
    this.basis.set(key, JSON.stringify(row));
    let content;
    if (this.detail) {
      try { content = await this.detail(row); } catch (error) { content = el("p", { class: "empty" }, String(error.message || error)); }
    } else {
      const { id, scope } = this.explain(row);
      try { content = await explanationText(id, scope); } catch (error) { content = String(error); }
    }
    if (this.open.has(key)) {
      this.open.set(key, content);
      this.render();
    }
  }

  visible() {
    let rows = this.rows;
    if (this.filter) {
      rows = rows.filter((r) => this.columns.some((c) => String(c.value(r)).toLowerCase().includes(this.filter)));
    }
    if (this.sort) {
      const column = this.columns.find((c) => c.name === this.sort.name);
      const sign = this.sort.descending ? -1 : 1;
      rows = [...rows].sort((a, b) => {
        const x = column.value(a), y = column.value(b);
        const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
        return sign * order || String(this.key(a)).localeCompare(String(this.key(b)));
      });
    }
    return rows;
  }

  render() {
    for (const th of this.table.tHead.rows[0].cells) {
      const name = th.getAttribute("data-sort");
      if (!name) continue;
      const sorted = this.sort && this.sort.name === name;
      th.setAttribute("aria-sort", sorted ? (this.sort.descending ? "descending" : "ascending") : "none");
    }
    const body = this.table.tBodies[0];
    const shown = this.visible();
    const opens = Boolean(this.explain || this.detail);
    const width = this.columns.length + (opens ? 1 : 0);
    const rows = [];
    for (const row of shown) {
      const key = this.key(row);
      const attrs = this.rowAttrs(row);
      const classes = [attrs.class, this.chosen(row) ? "chosen" : ""].filter(Boolean).join(" ");
      const tr = el("tr", { ...attrs, "data-key": key, class: classes || undefined });
      for (const column of this.columns) {
        const value = column.value(row);
        const shownValue = column.cell ? column.cell(row) : (column.num ? num(value) : value);
        tr.append(el("td", { class: [column.num ? "num" : "", column.mono ? "mono" : ""].join(" ").trim() || undefined,
          ...(column.attrs ? column.attrs(row) : {}), "data-value": column.num ? value : undefined }, shownValue));
      }
      if (opens) tr.append(el("td", { class: "explain-col" }, this.explainButton(row, key)));
      if (this.onRow) {
        tr.classList.add("clickable");
        tr.addEventListener("click", (event) => {
          if (event.target.closest("button, a, input")) return;
          this.onRow(row);
        });
      }
      rows.push(tr);
      if (this.open.has(key)) rows.push(this.explanationRow(row, key, width));
    }
    if (!shown.length) {
      rows.push(el("tr", {}, el("td", { colSpan: width, class: "empty" },
        this.rows.length ? `none of the ${num(this.rows.length)} rows matches “${this.filter}”` : this.emptyText)));
    }
    body.replaceChildren(...rows);
    if (this.count) {
      this.count.textContent = shown.length === this.rows.length ? `${num(this.rows.length)} rows`
        : `${num(shown.length)} of ${num(this.rows.length)} rows`;
    }
  }

  explainButton(row, key) {
    const open = this.open.has(key);
    const button = el("button", { type: "button", class: "explain", "aria-expanded": String(open) },
      open ? "close" : this.openLabel);
    button.addEventListener("click", () => this.toggle(row, key));
    return button;
  }

  explanationRow(row, key, width) {
    const content = this.open.get(key);
    const cell = el("td", { colSpan: width });
    if (this.detail) {
      cell.append(content === null ? el("p", { class: "hint" }, "loading…") : content);
    } else {
      const { id, scope } = this.explain(row);
      cell.append(el("div", { class: "explanation-head" },
        el("span", { class: "mono" }, id + (scope ? ` in ${scope}` : "")), explanationLink(id, scope)),
        el("pre", { class: "explanation" }, content === null ? "loading…" : content));
    }
    return el("tr", { class: "explanation-row", "data-explains": key }, cell);
  }

  async toggle(row, key) {
    if (this.open.has(key)) {
      this.open.delete(key);
      this.render();
      return;
    }
    this.open.set(key, null);
    this.render();
    await this.load(row, key);
  }
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
  // What changing it takes: a state keeps the threshold it was built with (recurrence tune says the same).
  document.getElementById("tune-change").textContent = `The state runs at ${body.review_threshold}, fixed when ` +
    "it was built: to run at another K, replay the journal into a fresh --state with a fresh --out and " +
    "--review-threshold K (a worker: a new --app-id with --review-threshold K). recurrence tune --state DIR " +
    "prints this table in a terminal.";
  const note = document.getElementById("tune-note");
  note.textContent = body.incomplete_scopes.length
    ? `${counted(body.incomplete_scopes.length, "scope")} ${body.incomplete_scopes.length === 1 ? "was" : "were"} replayed before these counters were kept and count short ` +
      `(${body.incomplete_scopes.slice(0, 5).join(", ")}${body.incomplete_scopes.length > 5 ? ", …" : ""}); ` +
      "rebuild the state to include them."
    : "flags: times a streak reached the threshold, any repair surface, head or not (= needing review + premature " +
      "flags); review proposals: only experience_content records, on their head revision.";
}

// -- the page's state and its sections ------------------------------------------------------------

const page = {
  stats: [],
  chosen: null,          // the chosen scope's id
  shown: undefined,      // the scope whose row was last scrolled into view
  allReview: false,      // the needing-review list of every scope, not only the chosen one's
  sparks: new Map(),     // "scope revision" -> its verdict history, or "failed"
  sparkBasis: new Map(), // scope -> its verdict counts and top revisions when their histories were read
  progress: null,
  tag: null,             // /progress's ETag
  positions: null,       // a worker's positions when its data was last read
  loadedOnce: false,
};

function byId(id) { return document.getElementById(id); }

function scopeOf(id) { return page.stats.find((s) => s.scope_id === id) || null; }

function fieldColumn(field, attrs) {
  return { name: field, label: LABELS[field], num: true, value: (s) => s.recurrence[field],
    title: DEFINITIONS[field], attrs, defined: Boolean(DEFINITIONS[field]) };
}

const scopesGrid = new Grid(byId("scopes"), {
  columns: [
    { name: "scope", label: "scope", mono: true, value: (s) => s.scope_id, attrs: (s) => ({ "data-scope": s.scope_id }) },
    ...FIELDS.map((field) => fieldColumn(field, (s) => ({ "data-scope": s.scope_id, "data-field": field }))),
    { name: "unknown_share", label: "unknown share", num: true,
      title: `unknown / selected; flagged (!) from ${percent(UNKNOWN_FLAG_SHARE)} of ${UNKNOWN_FLAG_MIN_SELECTED} or more`,
      value: (s) => { const share = unknownShare(s.recurrence); return share === null ? -1 : share; },
      cell: (s) => percent(unknownShare(s.recurrence)) + (unknownFlagged(s.recurrence) ? " !" : ""),
      attrs: (s) => ({ "data-share": s.scope_id, "data-flagged": String(unknownFlagged(s.recurrence)),
        ...(unknownFlagged(s.recurrence) ? { class: "num flagged" } : {}) }) },
  ],
  key: (s) => s.scope_id,
  rowAttrs: (s) => ({ "data-scope": s.scope_id, class: "scope-row" }),
  chosen: (s) => s.scope_id === page.chosen,
  onRow: (s) => choose(s.scope_id),
  sort: { name: "scope", descending: false },
  filterInput: byId("scopes-filter"),
  count: byId("scopes-count"),
  empty: "no scope has an accepted entry yet",
});

function sparkCell(row) {
  const history = page.sparks.get(`${row.scope} ${row.id}`);
  if (history === undefined) return "…";
  if (history === "failed") return "not available";
  return sparkline(history);
}

const topGrid = new Grid(byId("top"), {
  columns: [
    { name: "revision", label: "revision", mono: true, value: (r) => r.id },
    { name: "signature", label: "signature key", mono: true, value: (r) => r.signature },
    { name: "streak", label: "streak", num: true, value: (r) => r.streak, attrs: () => ({ "data-field": "streak" }) },
    { name: "verdicts", label: "verdicts over positions", value: (r) => {
      const history = page.sparks.get(`${r.scope} ${r.id}`);
      return Array.isArray(history) ? history.length : -1;
    }, cell: sparkCell, attrs: (r) => ({ "data-spark": r.id }) },
  ],
  key: (r) => `${r.scope} ${r.id}`,
  rowAttrs: (r) => ({ "data-revision": r.id }),
  explain: (r) => ({ id: r.id, scope: r.scope }),
  empty: "no revision of this scope has recurred",
});

// A revision of a scope with its signature and streak: the review list's rows, and the search's.
const REVISION_COLUMNS = [
    { name: "scope", label: "scope", mono: true, value: (r) => r.scope },
    { name: "revision", label: "revision", mono: true, value: (r) => r.id },
    { name: "signature", label: "signature key", mono: true, value: (r) => r.signature },
    { name: "streak", label: "streak", num: true, value: (r) => r.streak },
];

const reviewGrid = new Grid(byId("review"), {
  columns: REVISION_COLUMNS,
  key: (r) => `${r.scope} ${r.id}`,
  rowAttrs: (r) => ({ "data-review": `${r.scope} ${r.id}` }),
  explain: (r) => ({ id: r.id, scope: r.scope }),
  filterInput: byId("review-filter"),
  count: byId("review-count"),
  empty: "no revision needs review",
});

// A journal position as a person reads it: a line of a journal file, or a topic's partition and offset.
function originText(origin) {
  if (!origin) return "–";
  if (origin.line !== undefined) return `line ${num(origin.line)}`;
  if (origin.topic !== undefined) return `${origin.topic} ${origin.partition}/${num(origin.offset)}`;
  return JSON.stringify(origin);
}

const RAW_PREVIEW = 160;  // characters of a rejected entry shown in its row (explain and the ledger have it whole)

// A code's dead letters, listed (/dead-letters/{code}), each opening its explanation.
async function deadLetterList(row) {
  const body = await getJSON(`/dead-letters/${encodeURIComponent(row.code)}`);
  const table = el("table", { class: "dead-list", "data-dead-list": row.code }, el("thead"), el("tbody"));
  const grid = new Grid(table, {
    columns: [
      { name: "where", label: "journal position", value: (d) => originText(d.origin) },
      { name: "scope", label: "scope", mono: true, value: (d) => d.scope_id || "–" },
      { name: "detail", label: "why", value: (d) => d.detail },
      { name: "entry", label: "entry", mono: true, value: (d) => d.raw,
        cell: (d) => (d.raw.length > RAW_PREVIEW || d.raw_cut ? `${d.raw.slice(0, RAW_PREVIEW)}…` : d.raw) },
    ],
    key: (d) => d.dead_letter_id,
    rowAttrs: (d) => ({ "data-dead-letter": d.dead_letter_id }),
    explain: (d) => ({ id: d.dead_letter_id, scope: null }),
    empty: "none",
  });
  grid.setRows(body.dead_letters);
  const more = body.more ? `the first ${num(body.dead_letters.length)} of ${num(body.total)}` : `all ${num(body.total)}`;
  return el("div", { class: "detail" },
    el("p", { class: "hint" }, `${body.code}: ${more}, in journal order; explain shows why each was refused.`),
    el("div", { class: "scroll" }, table));
}

const deadGrid = new Grid(byId("dead-letters"), {
  columns: [
    { name: "code", label: "code", mono: true, value: (r) => r.code },
    { name: "entries", label: "entries", num: true, value: (r) => r.count, attrs: (r) => ({ "data-code": r.code }) },
  ],
  key: (r) => r.code,
  rowAttrs: (r) => ({ "data-dead-code": r.code }),
  detail: deadLetterList,
  openLabel: "list",
  empty: "none",
});

// A pattern opened: every scope and revision its row keeps, each revision's yield card one click away.
function patternDetail(pattern) {
  const table = el("table", { class: "pattern-revisions" }, el("thead"), el("tbody"));
  const grid = new Grid(table, {
    columns: [
      { name: "scope", label: "scope", mono: true, value: (r) => r.scope_id },
      { name: "revision", label: "revision", mono: true, value: (r) => refText(r.artifact_ref) },
    ],
    key: (r) => `${r.scope_id} ${refText(r.artifact_ref)}`,
    rowAttrs: (r) => ({ "data-pattern-revision": `${r.scope_id} ${refText(r.artifact_ref)}` }),
    explain: (r) => ({ id: refText(r.artifact_ref), scope: r.scope_id }),
    empty: "no revision kept",
  });
  grid.setRows(pattern.revisions);
  const scopes = `${pattern.scopes.join(", ")}${pattern.scopes_more_than_listed ? ", and more not kept" : ""}`;
  const find = el("button", { type: "button", class: "small" }, "search this signature");
  find.addEventListener("click", () => {
    byId("search").value = pattern.signature_key;
    search.run(pattern.signature_key);
  });
  return el("div", { class: "detail", "data-pattern-detail": pattern.signature_key },
    el("p", {}, el("b", {}, `recurred in ${num(pattern.scope_count)} scopes: `), el("span", { class: "mono" }, scopes)),
    el("p", { class: "hint" }, `${num(pattern.revisions.length)}${pattern.revisions_more_than_listed ? "+" : ""} ` +
      "revisions it recurred on (explain opens a revision's yield card in its scope) ", find),
    table);
}

const patternsGrid = new Grid(byId("patterns"), {
  columns: [
    { name: "signature", label: "signature key", mono: true, value: (p) => p.signature_key },
    { name: "scopes", label: "scopes", num: true, value: (p) => p.scope_count, title: "distinct scopes it recurred in",
      cell: (p) => num(p.scope_count) + (p.scopes_more_than_listed ? "+" : "") },
    { name: "revisions", label: "revisions", num: true, value: (p) => p.revisions.length,
      title: "distinct Experience revisions it recurred on (64 are kept)",
      cell: (p) => num(p.revisions.length) + (p.revisions_more_than_listed ? "+" : "") },
    { name: "recurrences", label: "recurrences", num: true, value: (p) => p.recurrences },
    { name: "state", label: "state", value: (p) => (p.suggested ? "suggested" : `below ${p.min_scopes} scopes`),
      attrs: () => ({ "data-pattern-state": "" }) },
  ],
  key: (p) => p.signature_key,
  rowAttrs: (p) => ({ "data-pattern": p.signature_key }),
  filterInput: byId("patterns-filter"),
  detail: patternDetail,
  empty: "no signature has recurred in several scopes yet",
});

const partitionsGrid = new Grid(byId("partitions"), {
  columns: [
    { name: "partition", label: "partition", num: true, value: (p) => p.partition },
    { name: "position", label: "journal position", num: true, value: (p) => (p.position === null ? -1 : p.position),
      cell: (p) => num(p.position), title: "the next journal offset the partition's state recorded" },
    { name: "lag", label: "lag", num: true, value: (p) => (p.lag === null ? -1 : p.lag), cell: (p) => num(p.lag),
      title: "journal entries not yet applied (high watermark - position)" },
    { name: "ready", label: "ready", value: (p) => (p.ready ? "ready" : "restoring") },
  ],
  key: (p) => String(p.partition),
  rowAttrs: (p) => ({ "data-partition": p.partition }),
  sort: { name: "partition", descending: false },
  empty: "no journal partition is assigned to this worker",
});

function unknownShare(counts) { return counts.selected ? counts.unknown / counts.selected : null; }

function unknownFlagged(counts) {
  const share = unknownShare(counts);
  return share !== null && counts.selected >= UNKNOWN_FLAG_MIN_SELECTED && share >= UNKNOWN_FLAG_SHARE;
}

function percent(share) { return share === null ? "–" : `${Math.round(100 * share)}%`; }

function renderTotals(stats) {
  const box = byId("totals");
  const tiles = [el("div", { class: "tile" }, el("div", { class: "value", "data-total": "scopes", "data-value": stats.length },
    num(stats.length)), el("div", { class: "label" }, "scopes"))];
  const totals = {};
  for (const field of FIELDS) totals[field] = stats.reduce((sum, s) => sum + s.recurrence[field], 0);
  const flagged = unknownFlagged(totals);
  for (const field of FIELDS) {
    const mark = field === "unknown" && flagged;
    tiles.push(el("div", { class: mark ? "tile flagged" : "tile", title: DEFINITIONS[field] },
      el("div", { class: "value", "data-total": field, "data-value": totals[field] }, num(totals[field])),
      el("div", { class: DEFINITIONS[field] ? "label defined" : "label" },
        LABELS[field] + (field === "unknown" && totals.selected ? ` · ${percent(unknownShare(totals))} of selected` : ""))));
  }
  box.replaceChildren(...tiles);
  // A large unknown share says so in words, not only in a number that is easy to read past.
  const scopes = stats.filter((s) => unknownFlagged(s.recurrence)).length;
  const banner = byId("unknown-flag");
  banner.hidden = !(flagged || scopes);
  banner.setAttribute("data-flagged", String(flagged));
  banner.setAttribute("data-scopes", String(scopes));
  banner.textContent = banner.hidden ? "" :
    `${percent(unknownShare(totals))} of the selections (${num(totals.unknown)} of ${num(totals.selected)}) ` +
    `reached no verdict (flagged ! in ${num(scopes)} of ${num(stats.length)} scopes): ` +
    "their Task Outcomes show neither the check bound to the lesson passing under its condition nor the failure " +
    "again, so whether those lessons help is not being measured. Look at how Outcomes report the lessons' checks " +
    `(flagged from ${percent(UNKNOWN_FLAG_SHARE)} of ${UNKNOWN_FLAG_MIN_SELECTED} or more selections).`;
}

function topRows(scope) {
  if (!scope) return [];
  return scope.recurrence.top_revisions.slice(0, CARDS).map((r) => ({
    scope: scope.scope_id, id: refText(r.artifact_ref), signature: r.signature_key, streak: r.terminal_recurred_streak,
  }));
}

function reviewRows() {
  const rows = [];
  let beyond = 0;
  for (const s of page.stats) {
    if (!page.allReview && s.scope_id !== page.chosen) continue;
    // top_revisions is ordered by streak, so the ones needing review come first.
    const needing = s.recurrence.top_revisions.slice(0, s.recurrence.needing_review);
    for (const r of needing) {
      rows.push({ scope: s.scope_id, id: refText(r.artifact_ref), signature: r.signature_key,
        streak: r.terminal_recurred_streak });
    }
    beyond += s.recurrence.needing_review - needing.length;
  }
  return { rows, beyond };
}

function renderReview() {
  const { rows, beyond } = reviewRows();
  const total = page.stats.reduce((sum, s) => sum + s.recurrence.needing_review, 0);
  byId("review-scope").textContent = page.allReview ? `in every scope (${num(total)})`
    : page.chosen ? `in ${page.chosen} (${num(rows.length + beyond)} of ${num(total)})` : "";
  reviewGrid.emptyText = page.allReview || !page.chosen ? "no revision needs review"
    : `no revision of ${page.chosen} needs review`;
  reviewGrid.setRows(rows);
  byId("review-more").textContent = beyond > 0
    ? `${num(beyond)} more need review than the ${TOP} top revisions per scope list (recurrence stats --top N lists them)`
    : "";
}

async function loadSparks(scope) {
  if (!scope) return;
  // A revision's verdict history changes only with a terminal verdict of its scope (recurred or avoided).
  const basis = `${scope.recurrence.recurred} ${scope.recurrence.avoided} ${topRows(scope).map((r) => r.id).join(" ")}`;
  const rows = topRows(scope);
  const stale = page.sparkBasis.get(scope.scope_id) !== basis;
  const wanted = rows.filter((r) => stale || !page.sparks.has(`${r.scope} ${r.id}`));
  if (!wanted.length) return;
  page.sparkBasis.set(scope.scope_id, basis);
  if (stale) for (const r of rows) page.sparks.delete(`${r.scope} ${r.id}`);
  topGrid.render();
  await Promise.all(wanted.map(async (r) => {
    try {
      const card = (await getJSON(explainPath(r.id, r.scope, "json"))).cards[0];
      page.sparks.set(`${r.scope} ${r.id}`, card.history || []);
    } catch (error) {
      page.sparks.set(`${r.scope} ${r.id}`, "failed");
    }
  }));
  if (page.chosen === scope.scope_id) topGrid.render();
}

// The chosen scope's row, scrolled into its table's view: only when the choice changed and was made
// away from the table (a link's #scope=, a search result); a refresh keeps where the reader scrolled, and
// the page opens with the table at its top.
function showChosenRow() {
  const row = byId("scopes").querySelector("tr.chosen");
  const box = row && row.closest(".scroll");
  if (!box) return;
  const top = row.offsetTop - box.clientHeight / 2;
  box.scrollTop = Math.max(0, top);
}

// ``why``: "reveal" scrolls the table to the row (chosen away from it); "busiest" says why the page chose it.
async function choose(scopeId, why) {
  const changed = scopeId !== page.shown;
  page.chosen = scopeOf(scopeId) ? scopeId : null;
  page.shown = page.chosen;
  if (changed) page.chosenWhy = why === "busiest" ? why : "";
  if (page.chosen && why !== "busiest") setAddress({ scope: page.chosen });
  scopesGrid.render();
  if (changed && why === "reveal") showChosenRow();
  const scope = scopeOf(page.chosen);
  byId("top-scope").textContent = !scope ? ""
    : page.chosenWhy === "busiest" ? `in ${scope.scope_id}, the scope with the most recurrences (click a scope to choose another)`
    : `in ${scope.scope_id}`;
  topGrid.setRows(topRows(scope));
  renderReview();
  await loadSparks(scope);
  await loadRepair(scope);
}

function renderDeadLetters(body) {
  byId("dead-letters-total").textContent = num(body.total);
  byId("dead-letters-total").setAttribute("data-value", body.total);
  deadGrid.setRows(Object.entries(body.by_code).map(([code, count]) => ({ code, count })));
}

function renderPatterns(body) {
  patternsGrid.emptyText = `no signature has recurred in ${body.min_scopes} scopes yet`;
  patternsGrid.setRows(body.patterns);
}

// -- how far the state is ------------------------------------------------------------------------------

function writtenAt(iso) {
  // The state's own time (the writer's clock), shown in UTC: never the browser's clock.
  return iso ? `${iso.replace("T", " ").replace(/\.\d+Z$/, "").replace(/Z$/, "")} UTC` : "not recorded";
}

function renderProgress(progress) {
  const status = byId("status");
  status.className = "";
  const live = byId("live");
  if (progress.runner === "embedded") {
    const journal = progress.journal;
    status.textContent = `the state as of journal line ${num(journal.line)} (byte ${num(journal.offset)}), ` +
      `written at ${writtenAt(progress.written_at)} · ledger ${num(progress.ledger_bytes)} bytes`;
    document.body.setAttribute("data-line", journal.line);
    live.textContent = progress.following ? "following" : "as opened";
    live.className = progress.following ? "live on" : "live";
    // The state is gone or replaced (serve's /readyz is 503): the numbers are the last view's, said so.
    const reasons = progress.reasons || [];
    const problem = byId("state-problem");
    problem.hidden = !reasons.length;
    problem.textContent = reasons.length ? `not current: ${reasons.join("; ")}` : "";
    if (reasons.length) {
      live.textContent = "state not current";
      live.className = "live off";
    }
    return;
  }
  const parts = progress.partitions || [];
  const lag = parts.reduce((sum, p) => sum + (p.lag || 0), 0);
  status.textContent = `worker ${progress.url || location.host}: journal partitions ` +
    `${parts.map((p) => `${p.partition} at ${num(p.position)}`).join(", ") || "none"} · lag ${num(lag)} · ${progress.status}`;
  live.textContent = progress.status === "ok" ? "ready" : progress.status;
  live.className = progress.status === "ok" ? "live on" : "live off";
  const section = byId("worker");
  section.hidden = false;
  byId("worker-status").textContent = `${progress.status}, ${num(progress.entries_processed)} entries processed`;
  byId("worker-reasons").textContent = (progress.reasons || []).length
    ? `not ready: ${progress.reasons.join("; ")}` : "ready: every assigned partition restored, lag within bounds";
  partitionsGrid.setRows(parts);
}

// /progress, asked with the tag of the last answer: true when the state moved (or on the first call).
async function poll() {
  const headers = { Accept: "application/json" };
  if (page.tag) headers["If-None-Match"] = page.tag;
  const response = await request("/progress", { headers });
  if (response.status === 304) return false;
  if (!response.ok) throw new Error(`/progress: ${response.status}`);
  page.tag = response.headers.get("ETag");
  const progress = await response.json();
  page.progress = progress;
  // serve: drawn with the numbers (refresh), from the view they were read from.
  if (progress.runner !== "worker") return true;
  renderProgress(progress);
  // A worker's lag moves with every new journal entry; its data changes only when its positions do.
  const positions = JSON.stringify((progress.partitions || []).map((p) => [p.partition, p.position]));
  const moved = positions !== page.positions;
  page.positions = positions;
  return moved;
}

async function refresh() {
  let shown = null;
  const [stats, deadLetters, patterns, tune] = await Promise.all([
    getJSON(`/statistics?top=${TOP}`, (response) => { shown = stateOf(response); }),
    getJSON("/dead-letters"), getJSON("/patterns"), getJSON("/tune"),
  ]);
  page.stats = stats;
  if (page.progress.runner !== "worker") {
    // A view replaced while the numbers were computed leaves the answer without its state: the header
    // keeps the last one, and the next poll reads everything again.
    if (shown) renderProgress(shown);
    else page.tag = null;
    page.shownState = shown || page.shownState || page.progress;
    if (!page.loadedOnce && !shown) renderProgress(page.progress);
    // Drawn in the same task as the header: the numbers' own line (what a test compares the header with).
    const drawn = shown || page.shownState;
    if (drawn && drawn.journal) byId("totals").setAttribute("data-line", drawn.journal.line);
  }
  renderTotals(stats);
  scopesGrid.setRows(stats);
  renderDeadLetters(deadLetters);
  renderPatterns(patterns);
  renderTune(tune);
  let why;
  if (!scopeOf(page.chosen)) {
    const wanted = new URLSearchParams(location.hash.slice(1)).get("scope");
    const busiest = [...stats].sort((a, b) => b.recurrence.recurred - a.recurrence.recurred)[0];
    why = scopeOf(wanted) ? "reveal" : "busiest";
    page.chosen = scopeOf(wanted) ? wanted : busiest ? busiest.scope_id : null;
  }
  await choose(page.chosen, why);
  await search.again();
}


// -- the repair loop: trends, retirement suggestions, an artifact's history --------------------------------

const TREND_SERIES = ["selected", "recurred", "avoided", "unknown"];
// The chart holds at most this many windows: the window is the scope's positions over it, rounded up.
const TREND_POINTS = 60;

function scopePath(scope, rest) { return `/scopes/${encodeURIComponent(scope)}/${rest}`; }

function trendChart(trend) {
  const rows = trend.windows;
  const width = 640, height = 220, left = 48, right = 8, top = 14, bottom = 36;
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
    "aria-label": `yield per ${trend.window} positions`, "data-windows": rows.length, "data-window": trend.window });
  const most = Math.max(1, ...rows.flatMap((r) => TREND_SERIES.map((f) => r[f])));
  const step = niceStep(most);
  const ceiling = Math.ceil(most / step) * step;
  const plotW = width - left - right, plotH = height - top - bottom;
  const y = (value) => top + plotH - (value / ceiling) * plotH;
  const x = (index) => left + (rows.length > 1 ? (index / (rows.length - 1)) * plotW : plotW / 2);
  for (let tick = 0; tick <= ceiling; tick += step) {
    svg.append(svgEl("line", { class: "axis", x1: left, x2: width - right, y1: y(tick), y2: y(tick) }));
    svg.append(svgEl("text", { class: "tick", x: left - 6, y: y(tick) + 4, "text-anchor": "end" },
      tick.toLocaleString()));
  }
  for (const field of TREND_SERIES) {
    const points = rows.map((r, i) => `${x(i).toFixed(1)},${y(r[field]).toFixed(1)}`).join(" ");
    const line = svgEl("polyline", { class: field, points, "data-series": field,
      "data-total": rows.reduce((sum, r) => sum + r[field], 0) });
    line.append(svgEl("title", {}, field));
    svg.append(line);
  }
  if (rows.length) {
    svg.append(svgEl("text", { class: "tick", x: left, y: height - bottom + 16 }, rows[0].first_position));
    svg.append(svgEl("text", { class: "tick", x: width - right, y: height - bottom + 16, "text-anchor": "end" },
      rows[rows.length - 1].last_position));
  }
  svg.append(svgEl("text", { class: "tick", x: left + plotW / 2, y: height - 6, "text-anchor": "middle" },
    `journal position (windows of ${trend.window.toLocaleString()})`));
  return svg;
}

const suggestionsGrid = new Grid(byId("suggestions"), {
  columns: [
    { name: "rule", label: "rule", mono: true, value: (r) => r.rule },
    { name: "revision", label: "revision", mono: true, value: (r) => r.explain },
    { name: "selected", label: "selected", num: true, value: (r) => r.selected },
    { name: "recurred", label: "recurred", num: true, value: (r) => r.recurred },
    { name: "avoided", label: "avoided", num: true, value: (r) => r.avoided },
    { name: "unknown", label: "unknown", num: true, value: (r) => r.unknown },
    { name: "text", label: "why", value: (r) => r.text },
  ],
  key: (r) => `${r.rule} ${r.explain}`,
  rowAttrs: (r) => ({ "data-suggestion": `${r.rule} ${r.explain}` }),
  explain: (r) => ({ id: r.explain, scope: r.scope }),
  empty: "no revision meets a retirement rule",
});

async function loadRepair(scope) {
  byId("repair-scope").textContent = scope ? `in ${scope.scope_id}` : "";
  const chart = byId("trend-chart");
  if (!scope) {
    chart.replaceChildren();
    suggestionsGrid.setRows([]);
    return;
  }
  try {
    // One window first for the scope's last position, then the window that draws TREND_POINTS at most.
    const whole = await getJSON(scopePath(scope.scope_id, "trends?window=9223372036854775807"));
    const window = Math.max(1, Math.ceil(whole.last_position / TREND_POINTS));
    const [trend, suggestions] = await Promise.all([
      getJSON(scopePath(scope.scope_id, `trends?window=${window}`)),
      getJSON(scopePath(scope.scope_id, "suggestions")),
    ]);
    chart.replaceChildren(trendChart(trend));
    byId("suggestions-count").textContent = `${num(suggestions.suggestions.length)} in ${scope.scope_id}`;
    suggestionsGrid.setRows(suggestions.suggestions.map((s) => ({ ...s, scope: scope.scope_id })));
  } catch (error) {
    chart.replaceChildren(el("p", { class: "hint" }, `the repair loop cannot be shown: ${error.message}`));
    suggestionsGrid.setRows([]);
  }
}

function effectChart(effect) {
  const width = 220, height = 70, left = 70;
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
    "aria-label": "recurrences per selection before and after the repair", "data-verdict": effect.verdict });
  const rates = [effect.before.recurrences_per_selection, effect.after.recurrences_per_selection];
  const most = Math.max(1, ...rates.filter((r) => r !== null));
  [["before", 0], ["after", 1]].forEach(([side, index]) => {
    const rate = rates[index];
    const y = 8 + index * 30;
    svg.append(svgEl("text", { class: "tick", x: left - 6, y: y + 14, "text-anchor": "end" },
      `${side} @${effect[side].artifact_ref.revision}`));
    const barW = rate === null ? 0 : (rate / most) * (width - left - 40);
    svg.append(svgEl("rect", { class: side, x: left, y, width: barW.toFixed(1), height: 18, "data-rate": rate ?? "" }));
    svg.append(svgEl("text", { class: "tick", x: left + barW + 4, y: y + 14 }, rate === null ? "–" : rate));
  });
  return svg;
}

async function showHistory(query) {
  const [family, ...rest] = query.split("/");
  const artifactId = rest.join("/");
  byId("search-what").textContent = `history of ${query}`;
  const box = byId("search-history");
  const note = byId("search-note");
  box.replaceChildren();
  box.hidden = false;
  const found = [];
  for (const s of page.stats.slice(0, SEARCH_ROWS)) {
    try {
      found.push(await getJSON(scopePath(s.scope_id,
        `history/${encodeURIComponent(family)}/${encodeURIComponent(artifactId)}`)));
    } catch (error) { /* not in this scope */ }
  }
  note.textContent = found.length
    ? `every revision in order, in ${num(found.length)} scope(s), as recurrence history prints it`
    : `no scope holds ${query}`;
  for (const h of found) {
    const section = el("div", { "data-history": `${h.scope_id} ${h.family}/${h.artifact_id}` },
      el("h3", {}, `${h.family}/${h.artifact_id} in ${h.scope_id}: head revision ${h.head_revision}`));
    const head = el("tr", {}, ...["revision", "head positions", "selected", "recurred", "avoided", "unknown", "streak",
      "proposals at"].map((label) => el("th", {}, label)));
    const body = el("tbody");
    for (const r of h.revisions) {
      const span = r.head_from === null ? "never" : `${r.head_from}..${r.head_until ?? ""}`;
      const explainButton = el("button", { type: "button", class: "small" }, "explain");
      explainButton.addEventListener("click", () => search.explain(r.explain, h.scope_id));
      body.append(el("tr", { "data-revision": r.artifact_ref.revision },
        el("td", { class: "mono" }, r.explain, " ", explainButton), el("td", {}, span),
        ...["selected", "recurred", "avoided", "unknown", "terminal_recurred_streak"].map((f) =>
          el("td", { class: "num" }, num(r[f]))),
        el("td", {}, r.proposal_positions.join(", ") || "–")));
      if (r.repair_effect) {
        const effect = r.repair_effect;
        const cell = el("td", { colspan: 8 },
          el("div", { class: "effect", "data-effect": effect.verdict },
            el("b", {}, `repair effect of @${r.artifact_ref.revision}: ${effect.verdict}`), ` — ${effect.text}`),
          el("div", { class: "chart" }, effectChart(effect)));
        body.append(el("tr", {}, cell));
      }
    }
    section.append(el("table", {}, el("thead", {}, head), body));
    box.append(section);
  }
}

// -- search: an observation (or any record) id, a revision, or a signature ------------------------------

const RECORD_ID = /^(sha256:)?[0-9a-f]{64}$/i;
const REVISION = /^[^\s/@]+\/[^\s@]+@\d+$/;
// family/artifact_id: an artifact's history (every revision)
const ARTIFACT = /^[^\s/@]+\/[^\s@]+$/;

const searchGrid = new Grid(byId("search-table"), {
  columns: [...REVISION_COLUMNS, { name: "detail", label: "note", value: (r) => r.detail }],
  key: (r) => `${r.scope} ${r.id}`,
  rowAttrs: (r) => ({ "data-found": `${r.scope} ${r.id}` }),
  explain: (r) => ({ id: r.id, scope: r.scope }),
  onRow: (r) => choose(r.scope, "reveal"),
  empty: "nothing found",
});

const search = {
  last: "",
  explained: null,  // {id, scope} of the explanation shown in the search's place (#explain=...)
  // What the search box shows again after a live update.
  async again() {
    if (search.explained) await search.explain(search.explained.id, search.explained.scope, false);
    else if (search.last) await search.run(search.last, false);
  },
  // An explanation on its own, as a link to it shows it: #explain=ID[&scope=S].
  async explain(id, scope, fresh = true) {
    search.last = "";
    search.explained = { id, scope };
    setAddress({ search: null, explain: id, in: scope || null });
    const box = byId("search-results");
    box.hidden = false;
    if (fresh) box.scrollIntoView({ block: "nearest" });
    byId("search-what").textContent = `explanation of ${id}${scope ? ` in ${scope}` : ""}`;
    byId("search-link").href = explanationHref(id, scope);
    byId("search-table").hidden = true;
    byId("search-history").hidden = true;
    const pre = byId("search-explanation");
    pre.hidden = false;
    byId("search-note").textContent = "the evidence chain, as recurrence explain prints it";
    pre.textContent = await explanationText(id, scope);
    const goTo = byId("search-scope");
    goTo.hidden = !(scope && scopeOf(scope));
    if (!goTo.hidden) {
      goTo.textContent = `show ${scope}`;
      goTo.onclick = () => choose(scope, "reveal");
    }
  },
  async run(query, fresh = true) {
    search.last = query;
    search.explained = null;
    setAddress({ search: query || null, explain: null, in: null });
    const box = byId("search-results");
    const note = byId("search-note");
    const pre = byId("search-explanation");
    const table = byId("search-table");
    if (!query) {
      box.hidden = true;
      return;
    }
    box.hidden = false;
    byId("search-link").href = location.href;  // the address now names this search (and the chosen scope)
    if (fresh) box.scrollIntoView({ block: "nearest" });
    const goTo = byId("search-scope");
    goTo.hidden = true;
    if (RECORD_ID.test(query)) {
      const id = query.toLowerCase().startsWith("sha256:") ? query.toLowerCase() : `sha256:${query.toLowerCase()}`;
      byId("search-what").textContent = `record ${id}`;
      table.hidden = true;
      pre.hidden = false;
      let found = null;
      try { found = await getJSON(explainPath(id, null, "json")); } catch (error) {
        note.textContent = `no record with this id here (${error.message})`;
        pre.hidden = true;
        return;
      }
      note.textContent = `${found.kind || "record"}${found.scope_id ? ` of scope ${found.scope_id}` : ""}: ` +
        "the evidence chain, as recurrence explain prints it";
      pre.textContent = await explanationText(id, null);
      if (found.scope_id && scopeOf(found.scope_id)) {
        goTo.hidden = false;
        goTo.textContent = `show ${found.scope_id}`;
        goTo.onclick = () => choose(found.scope_id, "reveal");
      }
      return;
    }
    pre.hidden = true;
    table.hidden = false;
    byId("search-history").hidden = true;
    if (ARTIFACT.test(query)) {
      table.hidden = true;
      await showHistory(query);
      return;
    }
    if (REVISION.test(query)) {
      byId("search-what").textContent = `revision ${query}`;
      let body;
      try { body = await getJSON(explainPath(query, null, "json")); } catch (error) {
        note.textContent = `no scope holds revision ${query} (${error.message})`;
        searchGrid.setRows([]);
        return;
      }
      note.textContent = `its yield card in ${counted(body.cards.length, "scope")}: click a row to choose the scope`;
      searchGrid.setRows(body.cards.map((card) => ({
        scope: card.scope_id, id: query, signature: card.signature_key || "", streak: card.streak,
        // Without a failure record the card has no counts: what `recurrence explain` says instead.
        detail: card.failure_record === false ? card.text
          : `selected ${num(card.selected)} · recurred ${num(card.recurred)} · avoided ${num(card.avoided)} · ` +
            `unknown ${num(card.unknown)}`,
      })));
      return;
    }
    const needle = query.toLowerCase();
    const rows = [];
    for (const s of page.stats) {
      s.recurrence.top_revisions.forEach((r, index) => {
        const id = refText(r.artifact_ref);
        if (r.signature_key.toLowerCase().includes(needle) || id.toLowerCase().includes(needle)
            || s.scope_id.toLowerCase().includes(needle)) {
          rows.push({ scope: s.scope_id, id, signature: r.signature_key, streak: r.terminal_recurred_streak,
            detail: index < s.recurrence.needing_review ? "needs review" : "" });
        }
      });
    }
    byId("search-what").textContent = `“${query}”`;
    note.textContent = rows.length
      ? `${counted(rows.length, "revision")} ${rows.length === 1 ? "matches" : "match"} by signature, revision or ` +
        `scope, searched among the top ${TOP} revisions of each scope` +
        (rows.length > SEARCH_ROWS ? `; the first ${SEARCH_ROWS} are listed` : "") + ": click a row to choose its scope"
      : "no top revision matches: try a whole observation id (sha256:…) or a revision (family/id@revision)";
    searchGrid.setRows(rows.slice(0, SEARCH_ROWS));
  },
};

byId("search-form").addEventListener("submit", (event) => {
  event.preventDefault();
  search.run(byId("search").value.trim());
});
byId("search-clear").addEventListener("click", () => {
  byId("search").value = "";
  search.run("");
});
byId("review-all").addEventListener("change", (event) => {
  page.allReview = event.target.checked;
  renderReview();
});

// One line per word, wherever the word is shown.
for (const box of document.querySelectorAll("[data-defines]")) {
  box.replaceChildren(...box.getAttribute("data-defines").split(" ").map((field) => {
    const [word, ...rest] = DEFINITIONS[field].split(": ");
    return el("span", { "data-define": field }, el("b", {}, word), `: ${rest.join(": ")} `);
  }));
}

// -- start, then follow ------------------------------------------------------------------------------

async function cycle() {
  try {
    if (await poll() || !page.loadedOnce) {
      await refresh();
      page.loadedOnce = true;
      document.body.setAttribute("data-loaded", "true");
      // The journal line of the state whose numbers and header are now drawn (one read, on serve).
      const drawn = page.shownState || page.progress;
      if (drawn.journal) document.body.setAttribute("data-shown-line", drawn.journal.line);
      document.body.setAttribute("data-refreshes", Number(document.body.getAttribute("data-refreshes") || 0) + 1);
    }
  } catch (error) {
    page.tag = null;  // ask again in full next time
    if (!page.loadedOnce) document.body.setAttribute("data-loaded", "error");
    if (declined) {
      offerToken();
      return;  // nothing to show without the token: the button starts again
    }
    const status = byId("status");
    status.textContent = String(error.message || error);
    status.className = "error";
  }
  setTimeout(cycle, POLL_MS);
}

// What the address asks to show (a link someone shared): taken before the first draw, which shows it.
function fromAddress() {
  const params = addressParams();
  const id = params.get("explain");
  if (id) {
    search.explained = { id, scope: params.get("in") };
    search.last = "";
  } else if (params.get("search")) {
    search.last = params.get("search");
    search.explained = null;
    byId("search").value = search.last;
  }
}

// A link within the page (an explanation's "link") changes only the fragment: show what it names.
window.addEventListener("hashchange", () => {
  fromAddress();
  const wanted = addressParams().get("scope");
  if (page.loadedOnce && scopeOf(wanted) && wanted !== page.chosen) choose(wanted, "reveal");
  if (page.loadedOnce) search.again();
});

// The footer's links lead to data paths: under a token a plain link would be refused (401), since the
// token never leaves the page's requests. With one, a click asks with the token and opens the answer.
document.querySelector("footer").addEventListener("click", async (event) => {
  const link = event.target.closest("a[href]");
  if (!link || !storedToken()) return;  // no token: the link works as it is
  event.preventDefault();
  const opened = window.open("", "_blank");  // opened within the click, where no popup blocker stops it
  const response = await request(link.getAttribute("href"));
  const type = (response.headers.get("Content-Type") || "text/plain").split(";")[0];
  const blob = new Blob([await response.arrayBuffer()], { type: type === "application/json" ? "text/plain" : type });
  if (opened) opened.location = URL.createObjectURL(blob);
});

takeTokenFromFragment();
fromAddress();
cycle();
