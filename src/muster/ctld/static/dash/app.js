// muster's dashboard: polls the controller's read-only JSON every POLL_MS and redraws.
// Text from the cluster (job names, reasons, user names) is only ever set as textContent,
// never parsed as HTML. No libraries, no build step.
"use strict";

(function () {
  const POLL_MS = 2000;
  const SHARES_MS = 10000;
  const SVG = "http://www.w3.org/2000/svg";
  const samples = []; // the charts' points, newest last (the controller keeps a day of them)
  let lastSample = 0;
  let stopped = false;
  let lastShares = 0;

  function $(id) {
    return document.getElementById(id);
  }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function pad(n) {
    return n < 10 ? "0" + n : String(n);
  }

  // Slurm's time layout, in the browser's time zone: 2026-12-03T18:21:40
  function when(t) {
    if (t === null || t === undefined) return "";
    const d = new Date(t * 1000);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + "T" +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  // Slurm's duration layout: [days-]hours:minutes:seconds
  function duration(s) {
    if (s === null || s === undefined) return "UNLIMITED";
    s = Math.max(0, Math.floor(s));
    const d = Math.floor(s / 86400);
    const h = Math.floor((s % 86400) / 3600);
    const m = Math.floor((s % 3600) / 60);
    const text = (h ? h + ":" + pad(m) : m) + ":" + pad(s % 60);
    return d ? d + "-" + pad(h) + ":" + pad(m) + ":" + pad(s % 60) : text;
  }

  function row(cells, attrs) {
    const tr = document.createElement("tr");
    for (const c of cells) {
      const td = document.createElement("td");
      if (c instanceof Node) td.appendChild(c);
      else td.textContent = c === null || c === undefined ? "" : String(c);
      tr.appendChild(td);
    }
    for (const k in attrs || {}) tr.setAttribute(k, attrs[k]);
    return tr;
  }

  function jobLink(id) {
    const a = el("a", id);
    a.href = "#job/" + encodeURIComponent(id);
    return a;
  }

  function fill(tbody, rows) {
    tbody.replaceChildren(...rows);
  }

  async function get(path) {
    const r = await fetch(path, { credentials: "same-origin", cache: "no-store" });
    let body = null;
    try {
      body = await r.json();
    } catch (e) {
      body = { error: "unexpected reply (HTTP " + r.status + ")" };
    }
    return { status: r.status, body: body };
  }

  function signedOut(why) {
    stopped = true;
    $("signin").hidden = false;
    $("signin-why").textContent = why || "";
    for (const v of document.querySelectorAll(".view")) v.hidden = true;
  }

  function showError(text) {
    const e = $("error");
    e.hidden = !text;
    e.textContent = text || "";
  }

  // --- overview: totals, the node grid, the charts -----------------------------------

  function drawTotals(t) {
    const cards = [
      ["GPUs allocated", t.gpus_alloc + " / " + t.gpus],
      ["GPUs out of service", t.gpus_out],
      ["CPUs allocated", t.cpus_alloc + " / " + t.cpus],
      ["Nodes down / drained", t.nodes_down + " / " + t.nodes_drain],
      ["Jobs running", t.jobs_running],
      ["Jobs pending", t.jobs_pending],
    ];
    $("totals").replaceChildren(...cards.map(function (c) {
      const d = el("div", null, "card");
      d.appendChild(el("span", c[0], "label"));
      d.appendChild(el("span", c[1], "value"));
      return d;
    }));
  }

  function drawNodes(nodes) {
    const out = [];
    for (const n of nodes) {
      const box = el("div", null, "node state-" + n.state.toLowerCase());
      box.dataset.node = n.name;
      const head = el("div", null, "node-head");
      head.appendChild(el("strong", n.name));
      head.appendChild(el("span", n.state, "node-state"));
      box.appendChild(head);
      const grid = el("div", null, "gpus");
      for (const g of n.gpus) {
        const cell = el("span", g.job_id !== undefined ? g.job_id : "", "gpu " + g.state);
        let title = n.name + " GPU " + g.index + ": " + g.state;
        if (g.job_id !== undefined) title += " (job " + g.job_id + ")";
        if ((g.state === "down" || g.state === "drain") && n.reason) title += ": " + n.reason;
        cell.title = title;
        grid.appendChild(cell);
      }
      if (!n.gpus.length) grid.appendChild(el("span", "no GPUs", "muted"));
      box.appendChild(grid);
      box.appendChild(el("div", "CPUs " + n.cpus_alloc + "/" + n.cpus + (n.gpu_type ? " · " + n.gpu_type : ""), "muted"));
      if (n.reason) box.appendChild(el("div", "Reason: " + n.reason + (n.reason_user ? " [" + n.reason_user + "]" : ""), "reason"));
      out.push(box);
    }
    $("nodes").replaceChildren(...out);
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // A line chart of series over the samples' times: [{name, cls, value(sample)}].
  function drawChart(target, pts, series, ymax, unit) {
    const W = 600, H = 200, L = 44, R = 8, T = 10, B = 24;
    const nodes = [];
    const t0 = pts.length ? pts[0].t : 0;
    const t1 = pts.length ? pts[pts.length - 1].t : 1;
    const span = Math.max(1, t1 - t0);
    const x = function (t) { return L + ((t - t0) / span) * (W - L - R); };
    const y = function (v) { return T + (1 - v / ymax) * (H - T - B); };
    for (const f of [0, 0.5, 1]) {
      nodes.push(svg("line", { x1: L, x2: W - R, y1: y(ymax * f), y2: y(ymax * f), class: "grid" }));
      nodes.push(svg("text", { x: L - 4, y: y(ymax * f) + 4, class: "axis", "text-anchor": "end" }, Math.round(ymax * f) + unit));
    }
    if (pts.length) {
      nodes.push(svg("text", { x: L, y: H - 6, class: "axis" }, when(t0).slice(11)));
      nodes.push(svg("text", { x: W - R, y: H - 6, class: "axis", "text-anchor": "end" }, when(t1).slice(11)));
    }
    let legend = L + 4;
    for (const s of series) {
      const line = pts.map(function (p) { return x(p.t).toFixed(1) + "," + y(s.value(p)).toFixed(1); }).join(" ");
      if (pts.length === 1) {
        nodes.push(svg("circle", { cx: x(pts[0].t), cy: y(s.value(pts[0])), r: 3, class: "dot " + s.cls }));
      } else if (pts.length > 1) {
        nodes.push(svg("polyline", { points: line, class: "series " + s.cls }));
      }
      nodes.push(svg("text", { x: legend, y: T + 12, class: "key " + s.cls }, s.name));
      legend += 8 * s.name.length + 16;
    }
    target.replaceChildren(...nodes);
    target.dataset.points = String(pts.length);
  }

  function drawCharts(now) {
    const pts = samples.concat(now ? [now] : []); // the samples, then this moment
    const pct = function (a, b) { return b ? (100 * a) / b : 0; };
    drawChart($("chart-util"), pts, [
      { name: "GPUs", cls: "s1", value: function (p) { return pct(p.gpus_alloc, p.gpus); } },
      { name: "CPUs", cls: "s2", value: function (p) { return pct(p.cpus_alloc, p.cpus); } },
    ], 100, "%");
    let top = 1;
    for (const p of pts) top = Math.max(top, p.jobs_running, p.jobs_pending);
    drawChart($("chart-queue"), pts, [
      { name: "running", cls: "s1", value: function (p) { return p.jobs_running; } },
      { name: "pending", cls: "s3", value: function (p) { return p.jobs_pending; } },
    ], Math.ceil(top * 1.1), "");
  }

  // --- the queue ---------------------------------------------------------------------

  function drawQueue(jobs, total) {
    const rows = jobs.map(function (j) {
      const state = el("span", j.completing ? "COMPLETING" : j.state, "state state-" + j.state.toLowerCase());
      const start = j.state === "PENDING" ? (j.planned_start ? when(j.planned_start) : "N/A") : when(j.start_time);
      return row([
        jobLink(j.id), j.name, j.user, j.account, j.partition, state,
        j.state === "PENDING" ? j.reason : (j.reason === "None" ? "" : j.reason),
        j.priority, when(j.submit_time), start, duration(j.run_time), duration(j.time_limit),
        j.num_nodes, j.num_gpus, j.state === "PENDING" ? j.sched_nodelist : j.nodelist,
      ], { "data-job": j.id, "data-state": j.state });
    });
    fill($("queue").tBodies[0], rows);
    $("queue-empty").hidden = jobs.length > 0;
    const more = $("queue-more");
    more.hidden = total <= jobs.length;
    more.textContent = "Showing the first " + jobs.length + " of " + total + " jobs (running, then pending by priority).";
  }

  // --- fair share --------------------------------------------------------------------

  function num(v, digits) {
    return v === null || v === undefined ? "" : Number(v).toFixed(digits);
  }

  function drawShares(data) {
    $("shares-none").hidden = data.available;
    fill($("shares").tBodies[0], data.rows.map(function (r) {
      const acct = el("span", r.account, "indent-" + Math.min(r.depth || 0, 8));
      return row([acct, r.user, r.raw_shares === null ? "" : r.raw_shares, num(r.norm_shares, 6),
        r.raw_usage === null ? "" : Math.round(r.raw_usage), num(r.effective_usage, 6), num(r.fairshare, 6)]);
    }));
  }

  // --- one job -----------------------------------------------------------------------

  function drawJob(j) {
    $("job-missing").hidden = true;
    $("job-id").textContent = j.id;
    const st = $("job-state");
    st.textContent = j.completing ? "COMPLETING" : j.state;
    st.className = "state state-" + j.state.toLowerCase();
    const fields = [
      ["Name", j.name], ["User", j.user + " (" + j.uid + ")"], ["Account", j.account],
      ["Partition", j.partition], ["QOS", j.qos], ["Reason", j.reason], ["Priority", j.priority],
      ["Submitted", when(j.submit_time)], ["Started", when(j.start_time)], ["Ended", when(j.end_time)],
      ["Planned start", j.state === "PENDING" ? when(j.planned_start) || "N/A" : ""],
      ["Run time", duration(j.run_time)], ["Time limit", duration(j.time_limit)],
      ["Nodes", j.nodelist || j.sched_nodelist], ["GPUs", j.num_gpus], ["TRES", j.tres],
      ["Restarts (requeues)", j.restart_count], ["Launch failures", j.launch_failures],
      ["Exit code", j.exit_code + ":" + j.exit_signal], ["Working directory", j.workdir],
      ["Output", j.stdout_path], ["Error", j.stderr_path], ["System comment", j.system_comment],
    ];
    const dl = [];
    for (const f of fields) {
      if (f[1] === "" || f[1] === null || f[1] === undefined) continue;
      dl.push(el("dt", f[0]));
      const dd = el("dd", f[1]);
      dd.dataset.field = f[0];
      dl.push(dd);
    }
    $("job-fields").replaceChildren(...dl);
    fill($("job-gpus").tBodies[0], j.gpus_by_node.map(function (g) {
      return row([g.node, g.gpu_ids.join(",") || "-", g.cpus]);
    }));
    fill($("job-steps").tBodies[0], j.steps.map(function (s) {
      return row([s.id, s.name, s.state, s.nodelist, s.num_tasks, s.num_gpus, duration(s.run_time)]);
    }));
    $("job-timeline").replaceChildren(...j.timeline.map(function (e) {
      const li = el("li");
      li.appendChild(el("time", when(e.time)));
      li.appendChild(el("strong", " " + e.event));
      const parts = [];
      for (const k in e.details) parts.push(k + "=" + e.details[k]);
      if (parts.length) li.appendChild(el("span", " " + parts.join(" "), "muted"));
      return li;
    }));
  }

  // --- polling -----------------------------------------------------------------------

  function route() {
    const h = location.hash.replace(/^#/, "");
    if (h.startsWith("job/")) return { view: "job", id: decodeURIComponent(h.slice(4)) };
    if (h === "queue" || h === "shares") return { view: h };
    return { view: "overview" };
  }

  function show(view) {
    for (const v of ["overview", "queue", "shares", "job"]) $(v + "-view").hidden = v !== view;
    for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.getAttribute("href") === "#" + view);
  }

  function header(me, cluster) {
    $("me").textContent = me.user + (me.admin ? " (admin)" : "");
    if (cluster !== undefined) $("cluster").textContent = "· " + cluster;
    $("updated").textContent = "updated " + when(Date.now() / 1000).slice(11);
  }

  async function poll() {
    if (stopped) return;
    const r = route();
    show(r.view);
    try {
      const st = await get("/dash/api/state?since=" + lastSample);
      if (st.status === 401) return signedOut(st.body.error);
      if (st.status !== 200) throw new Error(st.body.error);
      const d = st.body;
      header(d.me, d.cluster);
      for (const s of d.samples) samples.push(s);
      if (samples.length) lastSample = samples[samples.length - 1].t;
      while (samples.length > 8640) samples.shift();
      drawTotals(d.totals);
      drawNodes(d.nodes);
      drawCharts(d.totals);
      drawQueue(d.queue, d.queue_total);
      if (r.view === "shares" && Date.now() - lastShares > SHARES_MS) {
        const sh = await get("/dash/api/shares");
        if (sh.status === 200) {
          drawShares(sh.body);
          lastShares = Date.now();
        }
      }
      if (r.view === "job") {
        const jb = await get("/dash/api/jobs/" + encodeURIComponent(r.id));
        if (jb.status === 200) drawJob(jb.body.job);
        else {
          $("job-id").textContent = r.id;
          $("job-state").textContent = "";
          $("job-missing").hidden = false;
          for (const id of ["job-fields", "job-timeline"]) $(id).replaceChildren();
          for (const id of ["job-gpus", "job-steps"]) fill($(id).tBodies[0], []);
        }
      }
      showError("");
    } catch (e) {
      showError("Cannot reach the controller: " + (e && e.message ? e.message : e) + " (retrying)");
    }
  }

  function loop() {
    poll().finally(function () {
      if (!stopped) setTimeout(loop, POLL_MS);
    });
  }

  window.addEventListener("hashchange", function () {
    lastShares = 0;
    poll(); // at once; the loop goes on at its own pace
  });
  document.addEventListener("DOMContentLoaded", loop);
})();
