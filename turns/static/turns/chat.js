/* AgentLab conversation page: ask through the HTTP API, watch each turn over
 * its websocket (ws/turns/<id>/?after=<seq>, docs/chat-and-api.md#the-websocket-protocol).
 *
 * Every turn is drawn only from its event log: finished turns are read with
 * GET /api/turns/<id>/events?after=, active ones are streamed. A dropped
 * socket reconnects by itself with the last seq it applied (exponential back
 * off, 0.5 s to 8 s) and the page says "Reconnecting…" meanwhile; frames with
 * a seq already applied are ignored, so a reconnect never shows a step twice.
 *
 * An answer grows as the model writes it: llm.delta events carry its text
 * (attempt, step, completion, offset); a new completion number — a call
 * retried after a cut stream — replaces the text, it does not append. The
 * answer is rendered once: a thinking block that is the answer itself is
 * dropped when the answer arrives, and JSON tool requests show as tool
 * calls, never as text. Answers are Markdown, rendered by markdown-it with
 * raw HTML off and sanitised by DOMPurify (both served from
 * turns/static/turns/vendor/, no CDN); everything else is set as text.
 * The side-by-side page (templates/chat/side_by_side.html) uses the same
 * script to show its columns' turns: it has no ask form.
 * No build step. */
(function () {
  "use strict";

  var ACTIVE = { queued: 1, running: 1, waiting: 1 };
  var TERMINAL = { "turn.answered": "succeeded", "turn.asked": "succeeded", "turn.failed": "failed", "turn.cancelled": "cancelled" };
  var CLOSE_REASONS = {
    4400: "The stream request was malformed.",
    4401: "You are no longer logged in — reload the page to log in again.",
    4403: "This turn belongs to someone else.",
    4404: "This turn no longer exists."
  };

  // Markdown: raw HTML is text (html: false), and whatever markdown-it makes
  // passes DOMPurify before it reaches the page. Links open in a new tab.
  var md = window.markdownit ? window.markdownit({ html: false, linkify: true, breaks: true }) : null;
  if (window.DOMPurify) {
    window.DOMPurify.addHook("afterSanitizeAttributes", function (node) {
      if (node.tagName === "A") { node.setAttribute("target", "_blank"); node.setAttribute("rel", "noopener noreferrer"); }
    });
  }
  function markdown(node, text) {
    node.classList.add("md");
    if (md && window.DOMPurify) {
      node.innerHTML = window.DOMPurify.sanitize(md.render(String(text || "")));
    } else {
      node.textContent = String(text || "");  // the libraries did not load: plain text is safe
    }
    return node;
  }

  // Why a turn failed, in words (turn.failed's cause).
  var CAUSES = {
    empty_answer: "the model gave an empty answer",
    max_steps: "it used all its steps without a final answer",
    timeout: "it ran out of time",
    context_overflow: "the conversation no longer fits the model's context window",
    provider_error: "the model could not be reached or refused the request",
    error: "an internal error stopped it"
  };

  var pageData = JSON.parse(document.getElementById("page-data").textContent);
  var turnsEl = document.getElementById("turns");
  var connectionEl = document.getElementById("connection");
  var views = {};

  function cookie(name) {
    var m = document.cookie.match(new RegExp("(?:^|; )" + name + "=([^;]*)"));
    return m ? decodeURIComponent(m[1]) : "";
  }

  function api(method, url, body) {
    var opts = { method: method, credentials: "same-origin", headers: { "Accept": "application/json" } };
    if (method !== "GET") {
      opts.headers["X-CSRFToken"] = cookie("csrftoken");
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body || {});
    }
    return fetch(url, opts).then(function (res) {
      return res.text().then(function (text) {
        var data = null;
        try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
        return { ok: res.ok, status: res.status, data: data };
      });
    });
  }

  function errorText(res) {
    if (res.data && res.data.error) { return res.data.error.message; }
    return "Request failed (HTTP " + res.status + ").";
  }

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) { node.className = cls; }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }

  function pretty(value) {
    if (typeof value === "string") { return value; }
    try { return JSON.stringify(value, null, 2); } catch (e) { return String(value); }
  }

  function fmtMs(ms) {
    if (ms < 1000) { return ms + " ms"; }
    var s = ms / 1000;
    return s < 60 ? s.toFixed(1) + " s" : Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
  }

  function emptyUsage() { return { input: 0, output: 0, calls: 0, unknown: 0, cost: null, unpriced: 0 }; }

  function addUsage(bucket, u) {
    bucket.calls += 1;
    if (u.input_tokens === null || u.input_tokens === undefined || u.output_tokens === null || u.output_tokens === undefined) {
      bucket.unknown += 1;
    } else {
      bucket.input += u.input_tokens;
      bucket.output += u.output_tokens;
    }
    if (u.cost === null || u.cost === undefined) { bucket.unpriced += 1; } else { bucket.cost = (bucket.cost || 0) + u.cost; }
  }

  // as the turn's usage sums it (agentlab.agent.usage): a call whose tokens
  // the server did not report adds nothing and is counted apart; when no
  // call's tokens are known the count is "unknown", never "0 in / 0 out"
  function usageText(u) {
    var calls = u.calls + " call" + (u.calls === 1 ? "" : "s");
    if (u.calls && u.unknown === u.calls) { return "unknown, " + calls; }
    var text = u.input + " in / " + u.output + " out, " + calls;
    if (u.unknown) { text += " (" + u.unknown + " with unknown tokens)"; }
    return text;
  }

  function costText(agent, review) {
    var known = [agent.cost, review.cost].filter(function (c) { return c !== null; });
    if (!known.length) { return "cost —"; }
    var total = known.reduce(function (a, b) { return a + b; }, 0);
    var unpriced = agent.unpriced + review.unpriced;
    return "cost $" + total.toFixed(4) + (unpriced ? " (+" + unpriced + " unpriced)" : "");
  }

  // --- connection banner: shown while any turn's socket is reconnecting ---------
  var reconnecting = {};
  function updateBanner() {
    var ids = Object.keys(reconnecting);
    connectionEl.hidden = ids.length === 0;
    connectionEl.textContent = ids.length ? "Reconnecting… (live updates paused; nothing is lost)" : "";
  }

  // --- one turn -------------------------------------------------------------------
  function TurnView(summary) {
    this.id = summary.id;
    this.lastSeq = 0;
    this.status = summary.status;
    this.phase = "";
    this.ws = null;
    this.ended = false;
    this.closedFor = null;
    this.backoff = 500;
    this.calls = {};
    // usage by role, summed from the event log exactly as the turn's usage is
    // (agent: llm.usage events; review: the usage in review events)
    this.tokens = { agent: emptyUsage(), review: emptyUsage() };
    this.startedAt = null;
    this.finishedAt = null;
    this.build(summary);
  }

  TurnView.prototype.build = function (summary) {
    var root = document.getElementById("turn-" + this.id);
    if (!root) {
      root = el("article", "turn");
      root.id = "turn-" + this.id;
      root.setAttribute("data-turn-id", this.id);
      turnsEl.appendChild(root);
    }
    root.innerHTML = "";
    this.root = root;
    root.appendChild(el("div", "question", summary.question));
    var bar = el("div", "bar");
    this.statusEl = el("span", "badge status", "");
    this.phaseEl = el("span", "badge phase", "");
    // a working sign from the turn's first second (queued included), until it ends
    this.workingEl = el("span", "badge working", "working…");
    this.workingEl.setAttribute("role", "status");
    this.liveEl = el("span", "badge live", "reconnecting…");
    this.liveEl.hidden = true;
    bar.appendChild(this.statusEl);
    bar.appendChild(this.workingEl);
    bar.appendChild(this.phaseEl);
    bar.appendChild(this.liveEl);
    bar.appendChild(el("span", "spacer"));
    var actions = el("span", "actions");
    var self = this;
    this.buttons = {};
    [
      ["cancel", "Cancel", "danger small", "Stop this turn now."],
      ["retry", "Retry from scratch", "small", "Run the question again as a new attempt; the steps so far are kept in the history."],
      ["resume", "Resume", "small", "Continue where the turn stopped, reusing the model replies and tool results already recorded."]
    ].forEach(function (b) {
      var btn = el("button", b[2], b[1]);
      btn.type = "button";
      btn.title = b[3];
      btn.setAttribute("aria-label", b[1] + ": " + b[3]);
      btn.setAttribute("data-action", b[0]);
      btn.hidden = true;
      btn.addEventListener("click", function () { self.act(b[0], btn); });
      actions.appendChild(btn);
      self.buttons[b[0]] = btn;
    });
    bar.appendChild(actions);
    root.appendChild(bar);
    this.stepsEl = el("div", "steps");
    root.appendChild(this.stepsEl);
    this.outcomeEl = el("div", "outcome");
    root.appendChild(this.outcomeEl);
    this.errorEl = el("p", "error");
    this.errorEl.hidden = true;
    root.appendChild(this.errorEl);
    this.metaEl = el("div", "meta");
    root.appendChild(this.metaEl);
    this.render();
  };

  TurnView.prototype.setStatus = function (status) {
    this.status = status;
    this.render();
  };

  TurnView.prototype.render = function () {
    this.root.setAttribute("data-status", this.status);
    this.statusEl.textContent = this.status;
    this.statusEl.className = "badge status status-" + this.status;
    this.phaseEl.textContent = this.phase === "load" ? "loading the model…" : this.phase ? "phase: " + this.phase : "";
    this.phaseEl.hidden = !this.phase || !ACTIVE[this.status];
    this.workingEl.hidden = !ACTIVE[this.status] || this.status === "waiting";
    var s = this.status;
    this.buttons.cancel.hidden = !(ACTIVE[s] || s === "interrupted");
    this.buttons.retry.hidden = !(s === "failed" || s === "interrupted" || s === "cancelled");
    this.buttons.resume.hidden = !(s === "interrupted" || s === "failed");
    this.renderMeta();
    updateAsk();
  };

  TurnView.prototype.renderMeta = function () {
    var a = this.tokens.agent, r = this.tokens.review, parts = [];
    if (a.calls || r.calls) {
      var total = { input: a.input + r.input, output: a.output + r.output, calls: a.calls + r.calls, unknown: a.unknown + r.unknown };
      parts.push("tokens: " + usageText(total));
      parts.push("agent: " + usageText(a));
      if (r.calls) { parts.push("review: " + usageText(r)); }
      parts.push(costText(a, r));
    }
    if (this.startedAt) {
      var end = this.finishedAt || (ACTIVE[this.status] ? new Date() : this.lastAt);
      if (end) { parts.push("time: " + fmtMs(Math.max(0, end - this.startedAt))); }
    }
    this.metaEl.innerHTML = "";
    var self = this;
    parts.forEach(function (p) { self.metaEl.appendChild(el("span", null, p)); });
  };

  TurnView.prototype.note = function (text, cls) {
    this.stepsEl.appendChild(el("div", "step note" + (cls ? " " + cls : ""), text));
  };

  TurnView.prototype.apply = function (frame) {
    if (typeof frame.seq !== "number" || frame.seq <= this.lastSeq) { return; }
    this.lastSeq = frame.seq;
    this.root.setAttribute("data-last-seq", String(frame.seq));
    var d = frame.data || {};
    var at = frame.at ? new Date(frame.at) : null;
    this.lastAt = at;
    switch (frame.type) {
      case "turn.queued": this.status = "queued"; break;
      case "turn.started":
        this.status = "running";
        if (!this.startedAt) { this.startedAt = at; }
        this.finishedAt = null;
        break;
      case "phase": this.phase = d.phase || ""; break;
      case "llm.delta": this.delta(d); break;
      case "thinking": this.thinking(d); break;
      case "llm.usage":
        this.endLive(d);
        addUsage(this.tokens.agent, d);
        if (d.finish_reason === "length") { this.note("(this reply was cut off by the output-token limit)", "bad"); }
        break;
      case "tool.call": this.endLive(d); this.toolCall(d.call || {}, d); break;
      case "tool.result": this.toolResult(d.result || {}); break;
      case "approval.requested": this.approvalRequested(d); this.status = "waiting"; break;
      case "approval.resolved":
        if (this.status === "waiting") { this.status = "running"; }
        this.note("Approval " + (d.approval_id || "") + " " + (d.status || "resolved") + (d.by ? " by " + d.by : ""));
        if (this.approvalEls && this.approvalEls[d.approval_id]) { this.approvalEls[d.approval_id].remove(); }
        break;
      case "review":
        if (d.usage) { addUsage(this.tokens.review, d.usage); }
        this.note(reviewText(d), d.verdict === "failed" ? "bad" : "");
        break;
      case "attempt.retry":
        this.status = "queued";
        this.dropDrafts();
        this.outcomeEl.innerHTML = "";
        this.finishedAt = null;
        this.stepsEl.appendChild(el("div", "step note", "— attempt " + (d.attempt || "") + (d.by ? " (retried by " + d.by + ")" : "") + " —"));
        break;
      case "turn.answered": this.answered(d); break;
      case "turn.asked":
        this.outcomeEl.innerHTML = "";
        this.outcomeEl.appendChild(el("div", "asked", "The agent asks: " + (d.question || "")));
        break;
      case "turn.failed":
        this.outcomeEl.innerHTML = "";
        this.dropDrafts();
        if (d.cause === "length") { this.truncated(d); break; }
        var cause = d.cause || d.stop_reason || "error";
        this.outcomeEl.appendChild(el("div", "failure", "Failed: " + (CAUSES[cause] || cause) + (d.error && d.error !== CAUSES[cause] ? " — " + d.error : "") + ". Retry runs it again from scratch; Resume continues from the last recorded step."));
        break;
      case "turn.cancelled":
        this.outcomeEl.innerHTML = "";
        this.dropDrafts();
        this.outcomeEl.appendChild(el("div", "failure", d.reason ? "Cancelled: " + d.reason : "Cancelled" + (d.tool ? " (tool " + d.tool + " needs approval)" : "")));
        break;
      case "turn.interrupted":
        this.status = "interrupted";
        this.note("Interrupted: " + (d.reason || "the job stopped") + ". Resume to continue where it stopped.", "bad");
        break;
      case "turn.resumed": this.status = "queued"; this.note("Resumed"); break;
      case "history": this.note(historyText(d), "history"); break;
      default: break;
    }
    if (TERMINAL[frame.type]) {
      this.status = TERMINAL[frame.type];
      this.finishedAt = at;
      this.phase = "";
    }
    this.render();
  };

  // What a turn was given of its conversation (a "history" event), in words:
  // how many earlier turns and tokens, and which were left out and why.
  function historyText(d) {
    var n = (d.turns || []).length;
    var text = "History: " + (n === 1 ? "1 earlier turn" : n + " earlier turns") +
      (d.mode === "full" ? " with their tool steps" : "") + " (" + (d.tokens || 0) + " tokens)";
    var dropped = (d.dropped || []).map(function (x) {
      return "turn " + x.position + " (" + (x.reason === "budget" ? "over the token budget" : x.reason) + ")";
    });
    return dropped.length ? text + "; left out: " + dropped.join(", ") : text;
  }

  // What a review said, in words: the verdict, its note or instruction, and
  // when the reviewer gave nothing readable, that it did not (the answer stands).
  function reviewText(d) {
    var late = d.late ? " (arrived after the turn finished)" : "";
    if (d.verdict === "failed") {
      return "Review: the reviewer gave no readable verdict; the answer stands" + (d.error ? " (" + d.error + ")" : "") + late;
    }
    var words = { accept: "accepted", retry: "asked for a retry", cannot_judge: "could not judge" };
    var text = "Review: " + (words[d.verdict] || d.verdict || "");
    var said = d.verdict === "retry" && d.retry_instruction ? d.retry_instruction : d.note;
    return text + (said ? " — " + said : "") + late;
  }

  // --- text as it streams ------------------------------------------------------
  // One live block per turn: the visible text of the completion being
  // written. Its key is attempt/step/completion: a new key replaces the text.
  TurnView.prototype.delta = function (d) {
    var key = [d.attempt, d.step, d.completion].join("/");
    if (!this.live || this.live.key !== key) {
      if (this.live) { this.live.node.remove(); }
      var node = el("div", "step streaming");
      node.setAttribute("data-stream", key);
      this.stepsEl.appendChild(node);
      this.live = { key: key, attempt: d.attempt, step: d.step, text: "", node: node };
    }
    var live = this.live, offset = typeof d.offset === "number" ? d.offset : live.text.length;
    // the offset says where the fragment goes: a repeat is overwritten, not appended
    live.text = live.text.slice(0, Math.min(offset, live.text.length)) + (d.text || "");
    markdown(live.node, live.text);
  };

  // The step's record arrived (thinking, usage or a tool call): its live block has served.
  TurnView.prototype.endLive = function (d) {
    if (this.live && this.live.attempt === d.attempt && this.live.step === d.step) {
      this.live.node.remove();
      this.live = null;
    }
  };

  // A model's text that is not a tool request. JSON-in-text requests (the
  // local model's) show as their tool calls instead.
  TurnView.prototype.thinking = function (d) {
    this.endLive(d);
    var text = String(d.text || "");
    var t = text.trim();
    if (!t || t.charAt(0) === "{" || t.indexOf("```json") === 0) { return; }
    var node = el("div", "step thinking", text);
    node.setAttribute("data-step", String(d.step));
    this.stepsEl.appendChild(node);
  };

  // While a final answer is reviewed, it shows as a draft (then as the answer).
  TurnView.prototype.draft = function (answer) {
    var box = el("div", "step draft");
    box.appendChild(el("div", "label muted", "Answer (being checked…)"));
    box.appendChild(markdown(el("div", "text"), answer));
    this.stepsEl.appendChild(box);
  };

  TurnView.prototype.dropDrafts = function () {
    if (this.live) { this.live.node.remove(); this.live = null; }
    Array.prototype.forEach.call(this.stepsEl.querySelectorAll(".draft"), function (n) { n.remove(); });
  };

  // A final answer cut by the output-token limit: not an answer. The turn
  // failed (cause "length"); what was written so far is shown, marked.
  TurnView.prototype.truncated = function (d) {
    var box = el("div", "failure truncated");
    box.setAttribute("data-cause", "length");
    box.appendChild(el("strong", null, "Truncated"));
    box.appendChild(document.createTextNode(" — " + (d.error || "the answer was cut off by the output-token limit") + ". Retry to run it again."));
    if (d.partial_answer) { box.appendChild(el("pre", "partial", d.partial_answer)); }
    this.outcomeEl.appendChild(box);
  };

  // The turn-ending tools are shown as the answer / the clarifying question, not as steps.
  var ENDING_TOOLS = { final_answer: 1, ask_user: 1 };

  TurnView.prototype.toolCall = function (call) {
    if (call.name === "final_answer" && !call.error && ACTIVE[this.status]) {
      var args = call.arguments || {};
      if (args.answer !== undefined && args.answer !== null) { this.draft(pretty(args.answer)); }
      return;
    }
    if (ENDING_TOOLS[call.name] && !call.error) { return; }
    var box = el("details", "step tool");
    var summary = el("summary", null, "tool · " + (call.name || "tool") + " — running…");
    box.appendChild(summary);
    box.appendChild(el("h5", "muted", "arguments"));
    box.appendChild(el("pre", "args", pretty(call.arguments !== undefined && call.arguments !== null ? call.arguments : call.raw_arguments)));
    if (call.error) { box.appendChild(el("p", "error", call.error)); }
    this.stepsEl.appendChild(box);
    this.calls[call.id] = { box: box, summary: summary, name: call.name };
  };

  TurnView.prototype.toolResult = function (result) {
    var entry = this.calls[result.call_id];
    if (!entry && ENDING_TOOLS[result.name]) { return; }
    if (!entry) { this.toolCall({ id: result.call_id, name: result.name }); entry = this.calls[result.call_id]; }
    entry.summary.textContent = "tool · " + (entry.name || result.name || "tool") + (result.is_error ? " — error" : " — done");
    if (result.is_error) { entry.box.classList.add("error"); }
    entry.box.appendChild(el("h5", "muted", "result"));
    entry.box.appendChild(el("pre", "result", result.output));
  };

  TurnView.prototype.approvalRequested = function (d) {
    var box = el("div", "step approval");
    box.appendChild(el("div", null, "Tool " + ((d.call && d.call.name) || d.tool || "") + " needs your approval."));
    if (d.call && d.call.arguments) { box.appendChild(el("pre", null, pretty(d.call.arguments))); }
    var self = this, id = d.approval_id;
    if (id) {
      ["approve", "reject"].forEach(function (verb) {
        var btn = el("button", "small" + (verb === "reject" ? " danger" : ""), verb === "approve" ? "Approve" : "Reject");
        btn.type = "button";
        btn.addEventListener("click", function () {
          btn.disabled = true;
          api("POST", "/api/approvals/" + id + "/" + verb).then(function (res) {
            if (!res.ok) { self.showError(errorText(res)); btn.disabled = false; }
          });
        });
        box.appendChild(btn);
      });
      this.approvalEls = this.approvalEls || {};
      this.approvalEls[id] = box;
    }
    this.stepsEl.appendChild(box);
  };

  TurnView.prototype.answered = function (d) {
    this.dropDrafts();
    // the answer is shown once: a thinking block that was the answer itself goes
    var answer = String(d.answer || "").trim();
    Array.prototype.forEach.call(this.stepsEl.querySelectorAll(".thinking"), function (n) {
      if (n.textContent.trim() === answer) { n.remove(); }
    });
    this.outcomeEl.innerHTML = "";
    var box = el("div", "answer");
    box.appendChild(el("h4", null, "Answer"));
    box.appendChild(markdown(el("div", "text"), d.answer));
    if (d.evidence) { box.appendChild(el("h4", null, "Evidence")); box.appendChild(markdown(el("div", "evidence"), d.evidence)); }
    if (d.reasoning) { box.appendChild(el("h4", null, "Reasoning")); box.appendChild(markdown(el("div", "reasoning"), d.reasoning)); }
    this.outcomeEl.appendChild(box);
  };

  TurnView.prototype.showError = function (text) {
    this.errorEl.textContent = text || "";
    this.errorEl.hidden = !text;
  };

  TurnView.prototype.act = function (action, btn) {
    var self = this;
    btn.disabled = true;
    this.showError("");
    api("POST", "/api/turns/" + this.id + "/" + action).then(function (res) {
      btn.disabled = false;
      if (!res.ok) { self.showError(errorText(res)); return; }
      if (res.data && res.data.status) { self.setStatus(res.data.status); }
      self.follow();
    }, function () { btn.disabled = false; self.showError("The server could not be reached."); });
  };

  // Read the log over HTTP until it ends or stops growing (finished or interrupted turns).
  TurnView.prototype.load = function () {
    var self = this;
    return api("GET", "/api/turns/" + this.id + "/events?after=" + this.lastSeq).then(function (res) {
      if (!res.ok) { self.showError(errorText(res)); return; }
      res.data.events.forEach(function (f) { self.apply(f); });
      self.status = res.data.ended ? self.status : res.data.status;
      self.render();
      if (res.data.events.length && !res.data.ended && self.lastSeq < res.data.last_seq) { return self.load(); }
      if (ACTIVE[res.data.status]) { self.follow(); }
    });
  };

  // Stream the turn over its websocket from the last seq applied.
  TurnView.prototype.follow = function () {
    if (this.ws && this.ws.readyState <= 1) { return; }
    this.ended = false;
    this.closedFor = null;
    var self = this;
    var proto = location.protocol === "https:" ? "wss://" : "ws://";
    var ws = new WebSocket(proto + location.host + "/ws/turns/" + this.id + "/?after=" + this.lastSeq);
    this.ws = ws;
    ws.onopen = function () {
      self.backoff = 500;
    };
    ws.onmessage = function (msg) {
      var frame;
      try { frame = JSON.parse(msg.data); } catch (e) { return; }
      if (self.liveEl.hidden === false) { self.setReconnecting(false); }
      if (frame.type === "heartbeat") { self.renderMeta(); return; }
      if (frame.type === "stream.end") { self.ended = true; if (frame.status) { self.setStatus(frame.status); } return; }
      self.apply(frame);
    };
    ws.onclose = function (ev) {
      if (self.ws !== ws) { return; }
      self.ws = null;
      if (self.ended) { self.setReconnecting(false); return; }
      if (CLOSE_REASONS[ev.code]) {
        self.setReconnecting(false);
        self.showError(CLOSE_REASONS[ev.code]);
        return;
      }
      self.setReconnecting(true);
      var wait = self.backoff;
      self.backoff = Math.min(self.backoff * 2, 8000);
      setTimeout(function () { self.follow(); }, wait);
    };
  };

  TurnView.prototype.setReconnecting = function (on) {
    this.liveEl.hidden = !on;
    if (on) { reconnecting[this.id] = true; } else { delete reconnecting[this.id]; }
    updateBanner();
  };

  // A ticking clock for running turns.
  setInterval(function () {
    Object.keys(views).forEach(function (id) { if (ACTIVE[views[id].status]) { views[id].renderMeta(); } });
  }, 1000);

  // --- the page -------------------------------------------------------------------
  var chain = Promise.resolve();
  pageData.turns.forEach(function (summary) {
    var view = new TurnView(summary);
    views[summary.id] = view;
    chain = chain.then(function () { return view.load(); });
  });

  // Ask is off while a turn of this conversation runs (one at a time).
  function updateAsk() {
    var button = document.querySelector("#ask button[type=submit]");
    var hint = document.getElementById("ask-hint");
    if (!button) { return; }
    var busy = Object.keys(views).some(function (id) { return ACTIVE[views[id].status]; });
    button.disabled = busy || sending;
    if (hint) { hint.hidden = !busy; }
  }
  var sending = false;

  window.agentlabChat = { views: views };
  var form = document.getElementById("ask");
  var question = document.getElementById("question");
  var askError = document.getElementById("ask-error");
  // a page that only shows turns (the side-by-side page) has no ask form
  if (!form || !question) { return; }
  // Enter sends, Shift+Enter starts a new line (and IME composition is left alone).
  question.addEventListener("keydown", function (ev) {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      if (typeof form.requestSubmit === "function") { form.requestSubmit(); } else { form.dispatchEvent(new Event("submit", { cancelable: true })); }
    }
  });
  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var text = question.value.trim();
    if (!text) { return; }
    var button = form.querySelector("button[type=submit]");
    if (button.disabled) { return; }
    sending = true;
    updateAsk();
    askError.hidden = true;
    api("POST", "/api/conversations/" + pageData.conversationId + "/turns", { question: text }).then(function (res) {
      sending = false;
      updateAsk();
      if (!res.ok) { askError.textContent = errorText(res); askError.hidden = false; return; }
      question.value = "";
      var view = new TurnView({ id: res.data.turn_id, question: text, status: "queued" });
      views[view.id] = view;
      view.follow();
      view.root.scrollIntoView({ block: "nearest" });
    }, function () { sending = false; updateAsk(); askError.textContent = "The server could not be reached."; askError.hidden = false; });
  });
})();
