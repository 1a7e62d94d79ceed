/*
 * The run report's and the comparison page's charts, drawn with the vendored
 * Chart.js (vendor/chartjs, no CDN). Every number comes from the page's JSON
 * (evaluation.report.run_report_data / comparison_chart_data): this file only
 * draws. Drawn charts are kept in window.agentlabCharts by canvas id, so a
 * browser test can check what they show.
 */
(function () {
  "use strict";

  const charts = (window.agentlabCharts = {});
  const BLUE = "rgba(54, 116, 181, 0.75)";
  const ORANGE = "rgba(230, 126, 34, 0.75)";
  const GREY = "rgba(60, 60, 60, 0.55)";
  const PALETTE = ["#3674b5", "#e67e22", "#27ae60", "#c0392b", "#8e44ad", "#16a085", "#7f8c8d", "#d35400"];
  // One colour per stop reason on every run's report (not by position: the
  // same reason was green on one run and red on the next).
  const STOP_COLOURS = {
    final: "#27ae60",
    asked: "#3674b5",
    empty_answer: "#e67e22",
    length: "#d35400",
    max_steps: "#8e44ad",
    approval_required: "#16a085",
    approval_rejected: "#1abc9c",
    cancelled: "#7f8c8d",
    timeout: "#f1c40f",
    context_overflow: "#6d214f",
    provider_error: "#c0392b",
    error: "#922b21",
  };
  function stopColour(reason) {
    return STOP_COLOURS[reason] || "#34495e";
  }

  function pct(value) {
    return value === null || value === undefined ? "—" : (value * 100).toFixed(1) + "%";
  }

  function draw(id, config) {
    const canvas = document.getElementById(id);
    if (!canvas) return;
    config.options = Object.assign({ responsive: true, maintainAspectRatio: false, animation: false }, config.options);
    charts[id] = new Chart(canvas, config);
  }

  // A bar per label with a thin floating bar over it for its interval [low, high].
  function intervalBars(id, rows, options) {
    draw(id, {
      type: "bar",
      data: {
        labels: rows.map((r) => r.label + " (n=" + r.n + ")"),
        datasets: [
          { label: options.valueLabel, data: rows.map((r) => r.value), backgroundColor: options.colours || BLUE },
          {
            label: options.intervalLabel,
            data: rows.map((r) => (r.low === null ? null : [r.low, r.high])),
            backgroundColor: GREY,
            barPercentage: 0.12,
            grouped: false,
          },
        ],
      },
      options: {
        scales: { y: { min: options.min, max: options.max, ticks: { callback: (v) => pct(v) } } },
        plugins: {
          tooltip: {
            callbacks: {
              label: (ctx) => {
                const r = rows[ctx.dataIndex];
                return ctx.datasetIndex === 0
                  ? options.valueLabel + ": " + pct(r.value)
                  : options.intervalLabel + ": " + pct(r.low) + " to " + pct(r.high);
              },
            },
          },
        },
      },
    });
  }

  function runReport(data) {
    intervalBars("chart-accuracy", data.accuracy, {
      valueLabel: "accuracy",
      intervalLabel: "95% Wilson interval",
      min: 0,
      max: 1,
    });
    draw("chart-latency", {
      type: "bar",
      data: {
        labels: data.latency.labels,
        datasets: [{ label: "examples", data: data.latency.counts, backgroundColor: BLUE, barPercentage: 1, categoryPercentage: 1 }],
      },
      options: { scales: { y: { beginAtZero: true, ticks: { precision: 0 } } } },
    });
    draw("chart-models", {
      type: "bar",
      data: {
        labels: data.models.map((m) => m.label),
        datasets: [
          { label: "input tokens", data: data.models.map((m) => m.input_tokens), backgroundColor: BLUE, yAxisID: "y" },
          { label: "output tokens", data: data.models.map((m) => m.output_tokens), backgroundColor: ORANGE, yAxisID: "y" },
          { label: "cost (USD)", data: data.models.map((m) => m.cost), backgroundColor: GREY, yAxisID: "cost" },
        ],
      },
      options: {
        scales: {
          y: { beginAtZero: true, title: { display: true, text: "tokens" } },
          cost: { beginAtZero: true, position: "right", grid: { drawOnChartArea: false }, title: { display: true, text: "USD" } },
        },
      },
    });
    draw("chart-stop-reasons", {
      type: "doughnut",
      data: {
        labels: data.stop_reasons.labels,
        datasets: [{ data: data.stop_reasons.counts, backgroundColor: data.stop_reasons.labels.map(stopColour) }],
      },
      options: { plugins: { legend: { position: "right" } } },
    });
    draw("chart-review", {
      type: "bar",
      data: {
        labels: data.review.map((r) => r.label),
        datasets: [
          { label: "first attempt", data: data.review.map((r) => r.first), backgroundColor: ORANGE },
          { label: "final (after review)", data: data.review.map((r) => r.final), backgroundColor: BLUE },
        ],
      },
      options: { scales: { y: { min: 0, max: 1, ticks: { callback: (v) => pct(v) } } } },
    });
    draw("chart-trend", {
      type: "line",
      data: {
        labels: data.trend.map((p) => p.created_at.slice(0, 16).replace("T", " ") + " · v" + p.version),
        datasets: [
          {
            label: "accuracy (▲ the dataset's version changed)",
            data: data.trend.map((p) => p.accuracy),
            borderColor: BLUE,
            backgroundColor: BLUE,
            // a triangle where the run is on another dataset version than the one before
            pointStyle: data.trend.map((p) => (p.new_version ? "triangle" : "circle")),
            pointRadius: data.trend.map((p) => (p.current || p.new_version ? 7 : 4)),
            pointHoverRadius: 9,
          },
        ],
      },
      options: {
        scales: { y: { min: 0, max: 1, ticks: { callback: (v) => pct(v) } } },
        plugins: {
          tooltip: {
            callbacks: {
              label: (ctx) => {
                const p = data.trend[ctx.dataIndex];
                return p.run_id + " (version " + p.version + "): " + pct(ctx.parsed.y);
              },
            },
          },
        },
        onHover: (event, elements) => {
          event.native.target.style.cursor = elements.length ? "pointer" : "default";
        },
        // each point is a link to that run's report
        onClick: (event, elements) => {
          if (elements.length) window.location.href = data.trend[elements[0].index].url;
        },
      },
    });
  }

  function comparison(data) {
    const colours = data.differences.map((r) => (r.value === null || r.value >= 0 ? BLUE : "rgba(186, 33, 33, 0.75)"));
    intervalBars("chart-differences", data.differences, {
      valueLabel: "candidate − base",
      intervalLabel: "95% interval (" + data.interval + ")",
      colours: colours,
      min: -1,
      max: 1,
    });
    draw("chart-accuracies", {
      type: "bar",
      data: {
        labels: data.accuracies.labels,
        datasets: [
          { label: "base", data: data.accuracies.base, backgroundColor: GREY },
          { label: "candidate", data: data.accuracies.candidate, backgroundColor: BLUE },
        ],
      },
      options: { scales: { y: { min: 0, max: 1, ticks: { callback: (v) => pct(v) } } } },
    });
  }

  function start() {
    const report = document.getElementById("report-data");
    if (report) runReport(JSON.parse(report.textContent));
    const compared = document.getElementById("comparison-data");
    if (compared) comparison(JSON.parse(compared.textContent));
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
