/*
 * An experiment's accuracy-vs-cost chart on its leaderboard page, drawn with
 * the vendored Chart.js (vendor/chartjs, no CDN). Every number comes from the
 * page's JSON (evaluation.admin.experiments.chart_data): this file only
 * draws. Each variant is a labelled point (green: the top group) with its
 * 95% intervals on both axes (accuracy: Wilson or bootstrap; cost: bootstrap
 * over examples), a dashed ring where its place on the frontier is not
 * decided by them, and the Pareto frontier a line through its points by
 * ascending cost. The chart is kept in
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

  // Each variant's interval on both axes, and a dashed ring where its frontier place is undecided.
  const intervals = {
    id: "agentlabIntervals",
    afterDatasetsDraw(chart) {
      const ctx = chart.ctx;
      const x = chart.scales.x;
      const y = chart.scales.y;
      ctx.save();
      ctx.strokeStyle = "rgba(60, 60, 60, 0.55)";
      ctx.lineWidth = 1.5;
      chart.data.datasets[0].data.forEach((p) => {
        const px = x.getPixelForValue(p.x);
        const py = y.getPixelForValue(p.y);
        ctx.beginPath();
        if (p.ci_low !== null && p.ci_high !== null) {
          ctx.moveTo(px, y.getPixelForValue(p.ci_low));
          ctx.lineTo(px, y.getPixelForValue(p.ci_high));
        }
        if (p.x_low !== null && p.x_high !== null) {
          ctx.moveTo(x.getPixelForValue(p.x_low), py);
          ctx.lineTo(x.getPixelForValue(p.x_high), py);
        }
        ctx.stroke();
        if (p.undecided) {
          ctx.save();
          ctx.setLineDash([3, 3]);
          ctx.strokeStyle = "rgba(200, 120, 0, 0.95)";
          ctx.beginPath();
          ctx.arc(px, py, 11, 0, 2 * Math.PI);
          ctx.stroke();
          ctx.restore();
        }
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
                const cost = usd(p.x) + (p.x_low === null ? "" : " (" + usd(p.x_low) + "–" + usd(p.x_high) + ")");
                const place = p.undecided ? "; frontier place undecided" : "";
                return p.name + ": " + pct(p.y) + " (" + pct(p.ci_low) + "–" + pct(p.ci_high) + "), " + cost + place;
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
      plugins: [pointLabels, intervals],
    });
  }

  function start() {
    const data = document.getElementById("leaderboard-data");
    if (data) draw(JSON.parse(data.textContent));
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
