/*
 * An experiment's accuracy-vs-cost chart on its leaderboard page, drawn with
 * the vendored Chart.js (vendor/chartjs, no CDN). Every number comes from the
 * page's JSON (evaluation.admin.experiments.chart_data): this file only
 * draws. Each variant is a labelled point (green: the top group), the Pareto
 * frontier a line through its points by ascending cost. The chart is kept in
 * window.agentlabCharts["chart-frontier"], as charts.js keeps its own, so a
 * browser test can check what it shows.
 */
(function () {
  "use strict";

  const charts = (window.agentlabCharts = window.agentlabCharts || {});
  const TOP = "rgba(32, 122, 32, 0.85)";
  const OTHER = "rgba(60, 60, 60, 0.6)";
  const FRONTIER = "rgba(142, 68, 173, 0.9)";

  function pct(value) {
    return value === null || value === undefined ? "—" : (value * 100).toFixed(1) + "%";
  }

  function usd(value) {
    return value === null || value === undefined ? "—" : "$" + value.toFixed(4);
  }

  // Writes each variant's name beside its point (Chart.js has no data labels of its own).
  const pointLabels = {
    id: "agentlabPointLabels",
    afterDatasetsDraw(chart) {
      const ctx = chart.ctx;
      const meta = chart.getDatasetMeta(0);
      ctx.save();
      ctx.font = "12px sans-serif";
      ctx.fillStyle = "#333";
      ctx.textBaseline = "bottom";
      meta.data.forEach((element, i) => {
        const point = chart.data.datasets[0].data[i];
        ctx.fillText(point.name, element.x + 7, element.y - 4);
      });
      ctx.restore();
    },
  };

  function draw(data) {
    const canvas = document.getElementById("chart-frontier");
    if (!canvas) return;
    const ys = data.points.map((p) => p.y);
    charts["chart-frontier"] = new Chart(canvas, {
      type: "scatter",
      data: {
        datasets: [
          {
            label: "variants (green: top group)",
            data: data.points,
            pointBackgroundColor: data.points.map((p) => (p.top_group ? TOP : OTHER)),
            pointBorderColor: data.points.map((p) => (p.pareto ? FRONTIER : "transparent")),
            pointBorderWidth: 2,
            pointRadius: 6,
            pointHoverRadius: 8,
          },
          {
            label: "Pareto frontier",
            data: data.frontier,
            showLine: true,
            borderColor: FRONTIER,
            backgroundColor: FRONTIER,
            pointRadius: 0,
            borderWidth: 2,
          },
        ],
      },
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: false,
        layout: { padding: { right: 80, top: 16 } },
        scales: {
          x: { beginAtZero: true, title: { display: true, text: "total cost (USD)" } },
          y: {
            min: Math.max(0, Math.floor((Math.min(...ys, 1) - 0.1) * 10) / 10),
            max: 1,
            title: { display: true, text: "accuracy" },
            ticks: { callback: (v) => pct(v) },
          },
        },
        plugins: {
          tooltip: {
            filter: (item) => item.datasetIndex === 0,
            callbacks: {
              label: (ctx) => {
                const p = data.points[ctx.dataIndex];
                return p.name + ": " + pct(p.y) + " (" + pct(p.ci_low) + "–" + pct(p.ci_high) + "), " + usd(p.x);
              },
            },
          },
        },
        onHover: (event, elements) => {
          event.native.target.style.cursor = elements.some((e) => e.datasetIndex === 0) ? "pointer" : "default";
        },
        // each point is a link to that variant's run report
        onClick: (event, elements) => {
          const hit = elements.find((e) => e.datasetIndex === 0);
          if (hit) window.location.href = data.points[hit.index].url;
        },
      },
      plugins: [pointLabels],
    });
  }

  function start() {
    const data = document.getElementById("leaderboard-data");
    if (data) draw(JSON.parse(data.textContent));
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
