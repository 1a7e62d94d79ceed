/*
 * An online evaluator's trend page, drawn with the vendored Chart.js (no CDN).
 * Every number comes from the page's JSON (monitoring.windows.trend_data): this
 * file only draws. Chart one: the pass rate per window with its Wilson interval
 * as a band, the scored turns as bars on a second axis, and the end users'
 * thumbs-up share (dashed). Chart two: the chat
 * turns per window stacked by outcome, latency p50 and p95 as lines. The charts
 * are kept in window.agentlabCharts (as charts.js keeps its own) so a browser
 * test can check what they show.
 */
(function () {
  "use strict";

  const charts = (window.agentlabCharts = window.agentlabCharts || {});
  const OUTCOME_COLOURS = {
    answered: "rgba(32, 122, 32, 0.7)",
    asked: "rgba(41, 128, 185, 0.7)",
    failed: "rgba(186, 33, 33, 0.7)",
    cancelled: "rgba(120, 120, 120, 0.6)",
    rejected: "rgba(142, 68, 173, 0.6)",
  };

  // Each window's Wilson interval as a whisker too: the band alone is invisible for a lone window.
  const whiskers = {
    id: "agentlabWhiskers",
    afterDatasetsDraw(chart) {
      const rows = chart.config.options.agentlabRows || [];
      const meta = chart.getDatasetMeta(2);
      const y = chart.scales.y;
      const ctx = chart.ctx;
      ctx.save();
      ctx.strokeStyle = "rgba(32, 122, 32, 0.8)";
      ctx.lineWidth = 1.5;
      meta.data.forEach((point, i) => {
        const row = rows[i];
        if (!row || row.low === null || row.high === null) return;
        const top = y.getPixelForValue(row.high), bottom = y.getPixelForValue(row.low);
        ctx.beginPath();
        ctx.moveTo(point.x, top); ctx.lineTo(point.x, bottom);
        ctx.moveTo(point.x - 4, top); ctx.lineTo(point.x + 4, top);
        ctx.moveTo(point.x - 4, bottom); ctx.lineTo(point.x + 4, bottom);
        ctx.stroke();
      });
      ctx.restore();
    },
  };

  function scoreChart(data) {
    const canvas = document.getElementById("chart-score");
    if (!canvas) return;
    const labels = data.rows.map((r) => r.label);
    // the count bars stay in the lower half, under the rate
    const most = Math.max(1, ...data.rows.map((r) => r.n));
    charts["chart-score"] = new Chart(canvas, {
      data: {
        labels: labels,
        datasets: [
          { type: "line", label: "95% low", data: data.rows.map((r) => r.low), borderWidth: 0,
            pointRadius: 0, fill: false, backgroundColor: "rgba(32, 122, 32, 0.15)", yAxisID: "y", spanGaps: false },
          { type: "line", label: "95% high", data: data.rows.map((r) => r.high), borderWidth: 0,
            pointRadius: 0, fill: "-1", backgroundColor: "rgba(32, 122, 32, 0.15)", yAxisID: "y", spanGaps: false },
          { type: "line", label: "pass rate", data: data.rows.map((r) => r.rate), borderColor: "rgb(32, 122, 32)",
            backgroundColor: "rgb(32, 122, 32)", pointRadius: 3, yAxisID: "y", spanGaps: false },
          { type: "bar", label: "scored turns", data: data.rows.map((r) => r.n),
            backgroundColor: "rgba(60, 60, 60, 0.25)", yAxisID: "count" },
          // end users' feedback on the same turns: the share of thumbs up (its interval is in the table)
          { type: "line", label: "thumbs-up share", data: data.rows.map((r) => r.up_rate), borderColor: "rgb(47, 91, 211)",
            backgroundColor: "rgb(47, 91, 211)", borderDash: [6, 4], pointRadius: 3, yAxisID: "y", spanGaps: false },
        ],
      },
      plugins: [whiskers],
      options: {
        agentlabRows: data.rows,
        responsive: true, maintainAspectRatio: false, animation: false,
        scales: {
          y: { min: 0, max: 1, title: { display: true, text: "pass rate" } },
          count: { position: "right", beginAtZero: true, suggestedMax: 2 * most, grid: { drawOnChartArea: false },
                   title: { display: true, text: "scored turns" } },
        },
      },
    });
  }

  function turnsChart(data) {
    const canvas = document.getElementById("chart-turns");
    if (!canvas) return;
    const stacks = data.outcomes.map((outcome) => ({
      type: "bar", label: outcome || "(none)", stack: "outcomes", yAxisID: "turns",
      backgroundColor: OUTCOME_COLOURS[outcome] || "rgba(200, 150, 0, 0.6)",
      data: data.rows.map((r) => r.outcomes[outcome] || 0),
    }));
    charts["chart-turns"] = new Chart(canvas, {
      data: {
        labels: data.rows.map((r) => r.label),
        datasets: [
          ...stacks,
          { type: "line", label: "latency p50 (ms)", data: data.rows.map((r) => r.p50_ms), yAxisID: "ms",
            borderColor: "rgb(230, 126, 34)", backgroundColor: "rgb(230, 126, 34)", pointRadius: 2 },
          { type: "line", label: "latency p95 (ms)", data: data.rows.map((r) => r.p95_ms), yAxisID: "ms",
            borderColor: "rgb(192, 57, 43)", backgroundColor: "rgb(192, 57, 43)", borderDash: [5, 4], pointRadius: 2 },
        ],
      },
      options: {
        responsive: true, maintainAspectRatio: false, animation: false,
        scales: {
          x: { stacked: true },
          turns: { stacked: true, beginAtZero: true, title: { display: true, text: "chat turns" } },
          ms: { position: "right", beginAtZero: true, grid: { drawOnChartArea: false },
                title: { display: true, text: "latency (ms)" } },
        },
      },
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    const node = document.getElementById("trend-data");
    if (!node || typeof Chart === "undefined") return;
    const data = JSON.parse(node.textContent);
    scoreChart(data);
    turnsChart(data);
  });
})();
