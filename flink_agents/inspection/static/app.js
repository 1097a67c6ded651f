// The flink-agents web inspector: plain DOM, no build step, nothing from other hosts.
// Journal content is untrusted: it is only ever set as text (textContent, text nodes),
// never parsed as HTML.
"use strict";

const $ = (selector) => document.querySelector(selector);

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (name === "className") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function text(value) {
  if (value === null || value === undefined) return "-";
  return typeof value === "string" ? value : JSON.stringify(value);
}

function status(message, isError) {
  const node = $("#status");
  node.textContent = message || "";
  node.classList.toggle("error", Boolean(isError));
}

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
  };
  const response = await fetch(path, {credentials: "same-origin", ...init});
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (!response.ok) {
    const error = new Error((data && data.error) || `${response.status} ${response.statusText}`);
    error.status = response.status;
    throw error;
  }
  return data;
}

// The key as the API takes it: a string key as written, any other as JSON.
function keyText(key) {
  return typeof key === "string" ? key : JSON.stringify(key);
}

// --- runs ------------------------------------------------------------------------
let selected = null;  // {job, key, seq}

async function loadRuns() {
  const params = new URLSearchParams();
  for (const [name, value] of new FormData($("#filters"))) {
    if (String(value).trim()) params.set(name, String(value).trim());
  }
  try {
    const {runs} = await api(`/api/runs?${params}`);
    const body = $("#runs tbody");
    body.replaceChildren(...runs.map(runRow));
    $("#runs-count").textContent = `${runs.length} run${runs.length === 1 ? "" : "s"}`;
  } catch (error) {
    status(`runs: ${error.message}`, true);
  }
}

function runRow(run) {
  const row = el("tr", {dataset: {job: run.job, seq: String(run.seq)}, onclick: () => showRun(run)},
    el("td", {}, run.job), el("td", {}, text(run.key)), el("td", {}, run.seq),
    el("td", {className: `state-${run.state}`}, run.state + (run.outcome ? ` (${run.outcome})` : "")),
    el("td", {}, text(run.start)), el("td", {}, text(run.duration_ms)), el("td", {}, run.model_calls),
    el("td", {}, run.tool_calls), el("td", {}, text(run.tokens)));
  if (selected && selected.job === run.job && keyText(selected.key) === keyText(run.key) && selected.seq === run.seq) {
    row.classList.add("selected");
  }
  return row;
}

async function showRun(run) {
  selected = {job: run.job, key: run.key, seq: run.seq};
  for (const row of document.querySelectorAll("#runs tbody tr")) row.classList.remove("selected");
  const path = `/api/runs/${encodeURIComponent(run.job)}/${encodeURIComponent(keyText(run.key))}/${run.seq}`;
  try {
    const data = await api(path);
    renderRun(data.run);
    loadRuns();
  } catch (error) {
    status(`run: ${error.message}`, true);
  }
}

function renderRun(run) {
  $("#run").hidden = false;
  $("#run-title").textContent = `${run.job} · key ${keyText(run.key)} · #${run.seq}`;
  $("#run-summary").textContent = [
    `state ${run.state}${run.outcome ? ` (${run.outcome})` : ""}`, `start ${text(run.start)}`,
    `${text(run.duration_ms)} ms`, `${run.model_calls} model calls`, `${run.tool_calls} tool calls`,
    run.tokens !== null && run.tokens !== undefined ? `${run.tokens} tokens` : null,
    run.cost_usd !== null && run.cost_usd !== undefined ? `$${run.cost_usd}` : null,
  ].filter(Boolean).join(" · ");
  const error = $("#run-error");
  error.hidden = !run.error;
  error.textContent = run.error ? `error: ${run.error}` : "";
  renderTimeline(run.timeline || []);
  renderConversation(run.conversation || []);
}

function renderTimeline(bars) {
  const total = Math.max(1, ...bars.map((bar) => bar.offset_ms + bar.duration_ms));
  $("#timeline").replaceChildren(...bars.map((bar) => {
    const shape = el("div", {className: `bar bar-${bar.kind}${bar.error ? " bar-failed" : ""}`,
                             title: bar.error || bar.label});
    shape.style.left = `${(100 * bar.offset_ms) / total}%`;
    shape.style.width = `${(100 * bar.duration_ms) / total}%`;
    const meta = `${bar.duration_ms.toFixed(1)} ms` + (bar.tokens ? ` · ${bar.tokens} tok` : "");
    return el("div", {className: `bar-row kind-${bar.kind}`},
      el("span", {className: "bar-label", title: bar.step}, bar.label),
      el("div", {className: "bar-track"}, shape), el("span", {className: "bar-meta"}, meta));
  }));
}

function renderConversation(said) {
  $("#conversation").replaceChildren(...said.map((item) => {
    const li = el("li", {className: `msg role-${item.role}`});
    if (item.role === "request") {
      li.append(el("span", {className: "who"}, `request → ${item.model}`),
        `${item.messages} message${item.messages === 1 ? "" : "s"}; last user message: ${text(item.last_user_message)}`,
        item.tool_calls_asked.length ? `; tool calls so far: ${item.tool_calls_asked.join(", ")}` : "");
    } else if (item.role === "assistant") {
      li.append(el("span", {className: "who"}, `${item.model}${item.tokens ? ` (${item.tokens} tok)` : ""}`),
        item.content || "");
      for (const call of item.tool_calls) {
        li.append(el("div", {}, el("code", {}, `asks ${call.name}(${text(call.arguments)})`)));
      }
    } else if (item.role === "tool") {
      li.append(el("span", {className: "who"}, `tool ${item.tool}`),
        item.error !== undefined ? el("span", {className: "error"}, text(item.error)) : text(item.result));
    } else {
      li.append(el("span", {className: "who"}, "output"), text(item.output));
    }
    return li;
  }));
}

async function control(action) {
  if (!selected) return;
  const seq = action === "pause" || action === "resume" ? null : selected.seq;
  try {
    const {control: stored} = await api("/api/controls",
      {action, journal_id: selected.job, key: keyText(selected.key), seq});
    status(`${action} requested (${stored.state}); the job applies it on its next poll`);
  } catch (error) {
    status(`${action}: ${error.message}`, true);
  }
}

// --- approvals and callbacks -------------------------------------------------------
async function loadWaiting() {
  try {
    const {callbacks} = await api("/api/callbacks?state=pending");
    $("#callbacks tbody").replaceChildren(...callbacks.map((cb) => el("tr", {},
      el("td", {}, cb.callback), el("td", {}, cb.job), el("td", {}, text(cb.key)), el("td", {}, cb.seq),
      el("td", {}, cb.step), el("td", {}, cb.purpose), el("td", {}, text(cb.created)),
      el("td", {}, text(cb.deadline)))));
  } catch (error) {
    status(`callbacks: ${error.message}`, true);
  }
  try {
    const {approvals} = await api("/api/approvals?state=pending");
    $("#approvals-note").textContent = approvals.length ? "" : "No tool call is waiting for a decision.";
    $("#approvals tbody").replaceChildren(...approvals.map(approvalRow));
  } catch (error) {
    $("#approvals-note").textContent = error.message;
    $("#approvals tbody").replaceChildren();
  }
}

function approvalRow(approval) {
  const reason = el("input", {size: 18, placeholder: "reason", "aria-label": "reason"});
  const decide = async (approve) => {
    try {
      const {outcome} = await api(`/api/approvals/${encodeURIComponent(approval.callback_id)}`,
        {approve, reason: reason.value});
      status(`${approve ? "approved" : "rejected"} ${approval.tool}: ${outcome}`);
      loadWaiting();
    } catch (error) {
      status(`decision: ${error.message}`, true);
    }
  };
  return el("tr", {},
    el("td", {}, approval.journal_id), el("td", {}, text(approval.key)), el("td", {}, approval.seq),
    el("td", {}, approval.tool), el("td", {}, el("code", {}, text(approval.arguments))),
    el("td", {}, text(approval.deadline)),
    el("td", {}, el("button", {type: "button", className: "approve", onclick: () => decide(true)}, "Approve"),
      reason, el("button", {type: "button", className: "reject", onclick: () => decide(false)}, "Reject")));
}

document.addEventListener("DOMContentLoaded", () => {
  $("#filters").addEventListener("submit", (event) => { event.preventDefault(); loadRuns(); });
  for (const button of document.querySelectorAll("#run-controls button")) {
    button.addEventListener("click", () => control(button.dataset.action));
  }
  loadRuns();
  loadWaiting();
});
