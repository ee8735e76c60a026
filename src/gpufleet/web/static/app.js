/* gpufleet FinOps dashboard: fetches the page's JSON with the viewer's token and draws it with Chart.js. */
(function () {
  "use strict";
  const body = document.body;
  const root = body.dataset.root;
  const page = body.dataset.page;
  const content = document.getElementById("content");
  const COLORS = ["#2f6fde", "#e8833a", "#3aa76d", "#c94f6d", "#8a63d2", "#d4b13a", "#3ab5c9", "#7a8597"];
  const usd = new Intl.NumberFormat("en-US", { style: "currency", currency: "USD", maximumFractionDigits: 0 });
  const num = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });
  const pct = (x) => (x === null || x === undefined ? "–" : (100 * x).toFixed(1) + " %");
  const charts = [];

  function token() {
    const params = new URLSearchParams(location.search);
    const q = params.get("token");
    if (q) {
      // keep the token out of the address bar, history and Referer: it lives in this tab's sessionStorage only
      sessionStorage.setItem("gpufleet_token", q);
      params.delete("token");
      history.replaceState(null, "", location.pathname + (params.toString() ? "?" + params : ""));
    }
    return sessionStorage.getItem("gpufleet_token");
  }

  async function api(path) {
    const t = token();
    const r = await fetch(root + "/api/" + path, { headers: t ? { Authorization: "Bearer " + t } : {} });
    if (r.status === 401 || r.status === 403) {
      showLogin(r.status === 401 ? "Sign in with your gpufleet API token." : "Your token may not view this page.");
      throw new Error("auth");
    }
    if (!r.ok) throw new Error(path + ": HTTP " + r.status);
    return path.endsWith(".csv") || path.includes(".csv?") ? r.text() : r.json();
  }

  function showLogin(msg) {
    document.getElementById("login").hidden = false;
    document.getElementById("login-msg").textContent = msg;
    document.getElementById("login-form").onsubmit = (e) => {
      e.preventDefault();
      sessionStorage.setItem("gpufleet_token", document.getElementById("token").value);
      location.search = "";
    };
  }

  function el(tag, attrs, ...kids) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") n.className = v; else n.setAttribute(k, v);
    }
    for (const k of kids) n.append(k instanceof Node ? k : document.createTextNode(String(k)));
    return n;
  }

  function kpis(items) {
    return el("div", { class: "kpis" }, ...items.map(([k, v]) => el("div", { class: "kpi" }, el("div", { class: "k" }, k), el("div", { class: "v" }, v))));
  }

  function card(title, ...kids) { return el("div", { class: "card" }, el("h2", {}, title), ...kids); }

  function chartCard(title, id, config) {
    const canvas = el("canvas", { id: id, "aria-label": title, role: "img" });
    const c = card(title, el("div", { class: "chart" }, canvas));
    c._draw = () => {
      config.options = Object.assign({ responsive: true, maintainAspectRatio: false, animation: false }, config.options || {});
      charts.push(new Chart(canvas, config));
    };
    return c;
  }

  function table(cols, rows) {
    const head = el("tr", {}, ...cols.map((c) => el("th", { class: c.num ? "num" : "" }, c.label)));
    const trs = rows.map((r) => el("tr", {}, ...cols.map((c) => el("td", { class: c.num ? "num" : "" }, c.fmt ? c.fmt(r[c.key], r) : r[c.key] ?? ""))));
    return el("table", {}, el("thead", {}, head), el("tbody", {}, ...trs));
  }

  function mount(...nodes) {
    content.replaceChildren(...nodes);
    for (const n of content.querySelectorAll(".card")) if (n._draw) n._draw();
    body.dataset.charts = String(charts.length);
    body.dataset.ready = "1";
  }

  const day = (s) => new Date(s * 1000).toISOString().slice(5, 10);

  async function overview() {
    const d = await api("overview");
    const k = d.kpis;
    const nodes = [kpis([
      ["Cost in window", usd.format(k.cost_usd)], ["Idle waste", usd.format(k.idle_waste_usd) + " (" + pct(k.idle_waste_fraction) + ")"],
      ["GPU-h allocated", num.format(k.allocated_gpu_h)], ["GPU-h used", num.format(k.used_gpu_h)], ["Utilization", pct(k.utilization)],
    ])];
    const grid = el("div", { class: "grid" });
    grid.append(chartCard("Cost by tier", "cost-by-tier", {
      type: "doughnut",
      data: { labels: d.cost_by_tier.map((r) => r.tier), datasets: [{ data: d.cost_by_tier.map((r) => r.usd), backgroundColor: COLORS }] },
    }));
    grid.append(chartCard("Cost by line kind (direct, idle, shared)", "cost-by-kind", {
      type: "bar",
      data: { labels: d.cost_by_kind.map((r) => r.kind), datasets: [{ label: "USD", data: d.cost_by_kind.map((r) => r.usd), backgroundColor: COLORS.slice(0, 3) }] },
      options: { plugins: { legend: { display: false } } },
    }));
    if (d.daily) {
      const ds = [
        { label: "allocated GPU-h", data: d.daily.allocated_gpu_h, borderColor: COLORS[0] },
        { label: "used GPU-h", data: d.daily.used_gpu_h, borderColor: COLORS[2] },
      ];
      if (d.daily.unmeasured_gpu_h.some((x) => x > 0)) ds.push({ label: "GPU-h not measured", data: d.daily.unmeasured_gpu_h, borderColor: COLORS[4], borderDash: [2, 2] });
      if (d.scope === "fleet") ds.unshift({ label: "capacity GPU-h", data: d.daily.capacity_gpu_h, borderColor: COLORS[7], borderDash: [4, 4] });
      grid.append(chartCard("Utilization per day", "daily-usage", { type: "line", data: { labels: d.daily.day_start_s.map(day), datasets: ds } }));
    }
    grid.append(chartCard("Unallocated capacity by pool", "idle-by-pool", {
      type: "bar",
      data: { labels: d.idle_by_pool.map((r) => r.pool), datasets: [{ label: "idle USD", data: d.idle_by_pool.map((r) => r.usd), backgroundColor: COLORS[1] }] },
      options: { indexAxis: "y", plugins: { legend: { display: false } } },
    }));
    nodes.push(grid);
    mount(...nodes);
  }

  async function breakdown() {
    const dim = new URLSearchParams(location.search).get("dim") || "team";
    const d = await api("breakdown?dim=" + encodeURIComponent(dim));
    const tabs = el("p", { class: "tabs" }, ...["team", "tenant", "feature", "namespace"].map((x) => el("a", { href: "?dim=" + x, class: x === dim ? "active" : "" }, "by " + x)));
    const dl = el("button", { id: "csv" }, "Export CSV");
    dl.onclick = async () => {
      const text = await api("breakdown.csv?dim=" + encodeURIComponent(dim));
      const a = el("a", { href: URL.createObjectURL(new Blob([text], { type: "text/csv" })), download: "showback-" + dim + ".csv" });
      a.click();
    };
    const top = d.rows.slice(0, 15);
    const chart = chartCard("Cost by " + dim + " (top 15)", "breakdown-chart", {
      type: "bar",
      data: {
        labels: top.map((r) => r.key),
        datasets: [
          { label: "direct", data: top.map((r) => r.direct_usd), backgroundColor: COLORS[0] },
          { label: "idle", data: top.map((r) => r.idle_usd), backgroundColor: COLORS[1] },
          { label: "shared", data: top.map((r) => r.shared_usd), backgroundColor: COLORS[2] },
        ],
      },
      options: { scales: { x: { stacked: true }, y: { stacked: true } } },
    });
    const t = table([
      { key: "key", label: dim }, { key: "allocated_gpu_h", label: "GPU-h allocated", num: true, fmt: num.format },
      { key: "used_gpu_h", label: "GPU-h used", num: true, fmt: num.format }, { key: "utilization", label: "util", num: true, fmt: pct },
      { key: "direct_usd", label: "direct", num: true, fmt: usd.format }, { key: "idle_usd", label: "idle", num: true, fmt: usd.format },
      { key: "shared_usd", label: "shared", num: true, fmt: usd.format }, { key: "total_usd", label: "total", num: true, fmt: usd.format },
    ], d.rows);
    const more = d.rows.length < d.rows_total ? " (the " + d.rows.length + " largest of " + d.rows_total + "; the CSV has every row)" : "";
    mount(tabs, el("div", { class: "grid" }, chart), el("p", {}, dl), card("Showback" + more, t));
  }

  async function reservations() {
    const d = await api("reservations");
    const nodes = [kpis([["Reservations", String(d.rows.length)], ["Coverage of allocated GPU-h", pct(d.coverage)]])];
    nodes.push(el("div", { class: "grid" }, chartCard("Reservation utilization", "reservation-util", {
      type: "bar",
      data: { labels: d.rows.map((r) => r.id), datasets: [{ label: "utilization %", data: d.rows.map((r) => (r.utilization === null ? null : 100 * r.utilization)), backgroundColor: COLORS[0] }] },
      options: { scales: { y: { min: 0, max: 100 } } },
    })));
    nodes.push(card("Expiries", table([
      { key: "id", label: "reservation" }, { key: "pool", label: "pool" }, { key: "gpus", label: "GPUs", num: true },
      { key: "owner", label: "owner" }, { key: "days_to_expiry", label: "days to expiry", num: true, fmt: num.format },
      { key: "utilization", label: "utilization", num: true, fmt: pct }, { key: "window_cost_usd", label: "window cost", num: true, fmt: usd.format },
    ], d.rows)));
    mount(...nodes);
  }

  async function forecast() {
    const d = await api("forecast");
    if (!d.series) { mount(card("Forecast", el("p", { class: "muted" }, "No forecast for this scope yet."))); return; }
    const s = d.series;
    mount(kpis([["Method", s.method], ["MAPE", pct(d.mape)]]), el("div", { class: "grid" }, chartCard("GPUs: forecast vs actual", "forecast-chart", {
      type: "line",
      data: {
        labels: s.t_s.map((t) => new Date(t * 1000).toISOString().slice(5, 13).replace("T", " ") + "h"),
        datasets: [
          { label: "actual", data: s.actual_gpus, borderColor: COLORS[0], pointRadius: 0 },
          { label: "forecast", data: s.forecast_gpus, borderColor: COLORS[1], borderDash: [5, 4], pointRadius: 0 },
        ],
      },
    })));
  }

  async function opportunities() {
    const d = await api("opportunities");
    // the totals cover every finding and change; the tables hold the largest (the JSON caps its lists)
    const saving = d.rightsizing_total.monthly_saving_usd;
    const waste = d.idle_total.wasted_usd;
    const shown = (rows, total) => (rows.length < total ? " (the " + rows.length + " largest of " + total + ")" : "");
    const top = [...d.rightsizing].sort((a, b) => b.monthly_saving_usd - a.monthly_saving_usd).slice(0, 12);
    const spec = (s) => s.gpus + "× " + s.sku_id + ", " + s.cpu + " CPU, " + s.mem_gb + " GB";
    mount(
      kpis([["Idle findings", String(d.idle_total.count)], ["Reclaimable (idle findings)", usd.format(waste)], ["Rightsizing", String(d.rightsizing_total.count)], ["Saving / month", usd.format(saving)]]),
      el("div", { class: "grid" }, chartCard("Expected monthly saving by workload", "saving-chart", {
        type: "bar",
        data: { labels: top.map((r) => r.workload), datasets: [{ label: "USD / month", data: top.map((r) => r.monthly_saving_usd), backgroundColor: COLORS[2] }] },
        options: { indexAxis: "y", plugins: { legend: { display: false } } },
      })),
      card("Idle-allocated GPUs" + shown(d.idle, d.idle_total.count), table([
        { key: "workload", label: "workload" }, { key: "team", label: "team" }, { key: "idle_h", label: "idle h", num: true, fmt: num.format },
        { key: "idle_gpu_h", label: "GPU-h", num: true, fmt: num.format }, { key: "mean_util", label: "util", num: true, fmt: pct },
        { key: "wasted_usd", label: "waste", num: true, fmt: usd.format }, { key: "action", label: "action", fmt: (v) => el("span", { class: "badge" }, v) },
        { key: "reason", label: "reason" },
      ], d.idle)),
      card("Rightsizing" + shown(d.rightsizing, d.rightsizing_total.count), table([
        { key: "workload", label: "workload" }, { key: "team", label: "team" }, { key: "current", label: "current", fmt: spec },
        { key: "recommended", label: "recommended", fmt: spec }, { key: "reasons", label: "why", fmt: (v) => v.join(", ") },
        { key: "monthly_saving_usd", label: "saving / month", num: true, fmt: usd.format },
      ], d.rightsizing)),
    );
  }

  const PAGES = { overview, breakdown, reservations, forecast, opportunities };
  (PAGES[page] || overview)().then(
    () => api("overview").then((d) => { document.getElementById("scope").textContent = "scope: " + d.scope; }),
    (e) => { if (e.message !== "auth") { content.replaceChildren(el("p", { class: "muted" }, "Could not load: " + e.message)); body.dataset.ready = "error"; } },
  ).catch(() => {});
})();
