#include "nanochat/serve/page.h"

namespace nanochat::serve {

namespace {
// The page is plain HTML/CSS/JS so that it works offline and from a bare binary.
const char* const kPage = R"NCPAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>nanochat</title>
<style>
:root { --bg:#f7f7f8; --panel:#ffffff; --line:#e2e2e6; --text:#1d1d22; --muted:#6b6b76; --accent:#2f6fed; --user:#e8effd; --err:#b42318; }
* { box-sizing: border-box; }
html, body { height: 100%; margin: 0; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--text); background: var(--bg); display: flex; }
#side { width: 250px; background: var(--panel); border-right: 1px solid var(--line); display: flex; flex-direction: column; }
#side header { padding: 12px; display: flex; gap: 8px; }
#convlist { flex: 1; overflow-y: auto; list-style: none; margin: 0; padding: 0 8px 8px; }
#convlist li { padding: 6px 6px 6px 10px; border-radius: 8px; cursor: pointer; display: flex; align-items: center; gap: 6px; }
#convlist li span { flex: 1; min-width: 0; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
#convlist li.active { background: var(--user); }
#convlist li .del { color: var(--muted); border: 0; background: none; cursor: pointer; padding: 0 4px; }
#main { flex: 1; display: flex; flex-direction: column; min-width: 0; }
#top { display: flex; align-items: center; gap: 10px; padding: 8px 14px; border-bottom: 1px solid var(--line); background: var(--panel); flex-wrap: wrap; }
#top .title { font-weight: 600; }
#top .model { color: var(--muted); font-size: 13px; }
#top .spacer { flex: 1; }
#settings { display: flex; gap: 10px; flex-wrap: wrap; font-size: 13px; color: var(--muted); }
#settings label { display: flex; align-items: center; gap: 4px; }
#settings input { width: 64px; padding: 3px 5px; border: 1px solid var(--line); border-radius: 6px; font: inherit; color: var(--text); }
#messages { flex: 1; overflow-y: auto; padding: 18px 14px; display: flex; flex-direction: column; gap: 12px; }
.msg { max-width: 760px; width: fit-content; padding: 10px 14px; border-radius: 12px; white-space: pre-wrap; word-wrap: break-word; overflow-wrap: anywhere; }
.msg.user { align-self: flex-end; background: var(--user); }
.msg.assistant { align-self: flex-start; background: var(--panel); border: 1px solid var(--line); min-width: 40px; }
.msg.error { border-color: var(--err); color: var(--err); }
.msg .note { display: block; color: var(--muted); font-size: 12px; margin-top: 4px; }
#status { min-height: 22px; padding: 0 14px; color: var(--muted); font-size: 13px; }
#composer { display: flex; gap: 8px; padding: 10px 14px 14px; border-top: 1px solid var(--line); background: var(--panel); }
#input { flex: 1; resize: none; min-height: 44px; max-height: 180px; padding: 10px; border: 1px solid var(--line); border-radius: 10px; font: inherit; }
button { font: inherit; padding: 8px 14px; border-radius: 8px; border: 1px solid var(--line); background: var(--panel); cursor: pointer; }
button.primary { background: var(--accent); border-color: var(--accent); color: #fff; }
button:disabled { opacity: .5; cursor: default; }
#stop { display: none; }
body.busy #stop { display: inline-block; }
body.busy #send { display: none; }
#menu { display: none; }
#runs { display: none; position: fixed; inset: 40px 5% auto 5%; max-height: 85vh; overflow-y: auto; background: var(--panel); border: 1px solid var(--line); border-radius: 12px; padding: 12px; box-shadow: 0 8px 30px rgba(0,0,0,.15); z-index: 10; }
#runs.open { display: block; }
#runs ul { list-style: none; padding: 0; margin: 0 0 10px; display: flex; flex-wrap: wrap; gap: 6px; }
#runs li button.live::after { content: " \25CF"; color: #12b76a; }
#runs img { width: 100%; background: #fff; }
@media (max-width: 700px) {
  #side { position: fixed; inset: 0 30% 0 0; z-index: 5; transform: translateX(-105%); transition: transform .2s; }
  body.menu #side { transform: none; box-shadow: 0 0 30px rgba(0,0,0,.2); }
  #menu { display: inline-block; }
  .msg { max-width: 92%; }
  #settings input { width: 52px; }
}
</style>
</head>
<body>
<nav id="side">
  <header><button id="newchat" class="primary" type="button">+ New chat</button><button id="runsbtn" type="button">Runs</button></header>
  <ul id="convlist"></ul>
</nav>
<div id="main">
  <div id="top">
    <button id="menu" type="button" aria-label="conversations">&#9776;</button>
    <span class="title">nanochat</span><span class="model" id="model"></span>
    <span class="spacer"></span>
    <div id="settings">
      <label>temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="0.8"></label>
      <label>top-k <input id="topk" type="number" min="0" max="1000" step="1" value="50"></label>
      <label>max tokens <input id="maxtokens" type="number" min="1" step="1" value="512"></label>
    </div>
  </div>
  <div id="messages" aria-live="polite"></div>
  <div id="status"></div>
  <form id="composer">
    <textarea id="input" rows="1" placeholder="Message nanochat (Enter sends, Shift+Enter new line)"></textarea>
    <button id="send" class="primary" type="submit">Send</button>
    <button id="stop" type="button">Stop</button>
  </form>
</div>
<div id="runs"><div style="display:flex;justify-content:space-between;align-items:center"><b>Training runs</b><button id="runsclose" type="button">Close</button></div><ul id="runlist"></ul><div id="chart"></div></div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const KEY = "nanochat.conversations";
let convs = [];
let current = null;
let controller = null;

function load() {
  try { convs = JSON.parse(localStorage.getItem(KEY) || "[]"); } catch (e) { convs = []; }
  if (!Array.isArray(convs)) convs = [];
  current = localStorage.getItem(KEY + ".current");
  if (!convs.find(c => c.id === current)) current = convs.length ? convs[0].id : null;
}
function save() {
  try { localStorage.setItem(KEY, JSON.stringify(convs)); localStorage.setItem(KEY + ".current", current || ""); } catch (e) {}
}
function conv() { return convs.find(c => c.id === current) || null; }
function newConv() {
  const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 7), title: "New chat", messages: [] };
  convs.unshift(c); current = c.id; save(); return c;
}
function renderList() {
  const ul = $("convlist"); ul.textContent = "";
  for (const c of convs) {
    const li = document.createElement("li");
    li.className = c.id === current ? "active" : "";
    const t = document.createElement("span"); t.textContent = c.title; li.appendChild(t);
    const d = document.createElement("button"); d.className = "del"; d.textContent = "\u00d7"; d.title = "delete";
    d.onclick = (ev) => { ev.stopPropagation(); if (controller) return; convs = convs.filter(x => x.id !== c.id); if (current === c.id) current = convs.length ? convs[0].id : null; save(); renderAll(); };
    li.appendChild(d);
    li.onclick = () => { if (controller) return; current = c.id; save(); document.body.classList.remove("menu"); renderAll(); };
    ul.appendChild(li);
  }
}
function bubble(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  const span = document.createElement("span"); span.className = "text";
  if (text) span.appendChild(document.createTextNode(text));
  div.appendChild(span);
  $("messages").appendChild(div);
  return div;
}
function renderMessages() {
  const box = $("messages"); box.textContent = "";
  const c = conv();
  if (!c) return;
  for (const m of c.messages) {
    const b = bubble(m.role, m.content);
    if (m.error) b.classList.add("error");
    if (m.note) { const n = document.createElement("span"); n.className = "note"; n.textContent = m.note; b.appendChild(n); }
  }
  box.scrollTop = box.scrollHeight;
}
function renderAll() { renderList(); renderMessages(); }
function setStatus(s) { $("status").textContent = s; }
function num(id, lo, hi, def) { const v = Number($(id).value); return Number.isFinite(v) ? Math.min(hi, Math.max(lo, v)) : def; }

async function send(text) {
  if (controller || !text.trim()) return;
  const c = conv() || newConv();
  if (!c.messages.length) c.title = text.slice(0, 40);
  c.messages.push({ role: "user", content: text });
  const answer = { role: "assistant", content: "" };
  save(); renderAll();
  const b = bubble("assistant", "");
  const span = b.querySelector(".text");
  const box = $("messages");
  document.body.classList.add("busy");
  setStatus("Sending\u2026");
  controller = new AbortController();
  const body = {
    messages: c.messages.filter(m => !m.error).map(m => ({ role: m.role, content: m.content })),
    temperature: num("temperature", 0, 2, 0.8), top_k: Math.round(num("topk", 0, 1000, 50)),
    max_tokens: Math.round(num("maxtokens", 1, 100000, 512)), stream: true,
  };
  let failed = null;
  try {
    const res = await fetch("/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body), signal: controller.signal });
    if (!res.ok) {
      let msg = "HTTP " + res.status;
      try { msg = (await res.json()).error.message; } catch (e) {}
      throw new Error(msg);
    }
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = "", finished = false;
    while (!finished) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, cut); buf = buf.slice(cut + 2);
        for (const line of block.split("\n")) {
          if (line.startsWith(": waiting")) { setStatus("Waiting for a free worker (" + line.slice(10) + " in line)\u2026"); continue; }
          if (line.startsWith(":")) { setStatus("Generating\u2026"); continue; }
          if (!line.startsWith("data: ")) continue;
          const data = line.slice(6);
          if (data === "[DONE]") { finished = true; break; }
          const j = JSON.parse(data);
          if (j.error) throw new Error(j.error.message);
          setStatus("Generating\u2026");
          const ch = j.choices && j.choices[0];
          if (ch && ch.delta && ch.delta.content) {
            answer.content += ch.delta.content;
            span.appendChild(document.createTextNode(ch.delta.content));
            box.scrollTop = box.scrollHeight;
          }
          if (ch && ch.finish_reason === "length") answer.note = "(cut at the token limit)";
        }
      }
    }
  } catch (e) {
    if (e.name === "AbortError") answer.note = "(stopped)";
    else failed = e.message || String(e);
  }
  controller = null;
  document.body.classList.remove("busy");
  setStatus("");
  if (failed) {
    answer.content = answer.content ? answer.content + "\n" : "";
    answer.content += "Error: " + failed;
    answer.error = true;
    b.classList.add("error");
    span.textContent = answer.content;
  }
  if (answer.note) { const n = document.createElement("span"); n.className = "note"; n.textContent = answer.note; b.appendChild(n); }
  c.messages.push(answer);
  save(); renderList();
  $("input").focus();
}

$("composer").addEventListener("submit", (ev) => { ev.preventDefault(); const t = $("input").value; $("input").value = ""; send(t); });
$("input").addEventListener("keydown", (ev) => { if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("composer").requestSubmit(); } });
$("stop").onclick = () => { if (controller) controller.abort(); };
$("newchat").onclick = () => { if (controller) return; const c = conv(); if (!c || c.messages.length) newConv(); document.body.classList.remove("menu"); renderAll(); $("input").focus(); };
$("menu").onclick = () => document.body.classList.toggle("menu");

let chartTimer = null;
function showChart(run) {
  const box = $("chart");
  const url = "/runs/" + encodeURIComponent(run.kind) + "/" + encodeURIComponent(run.tag) + "/chart.svg";
  const draw = () => { box.innerHTML = ""; const img = new Image(); img.alt = run.kind + " " + run.tag; img.src = url + "?t=" + Date.now(); box.appendChild(img); };
  clearInterval(chartTimer); draw(); chartTimer = setInterval(draw, 5000);
}
$("runsbtn").onclick = async () => {
  $("runs").classList.add("open");
  const ul = $("runlist"); ul.textContent = "Loading\u2026";
  try {
    const j = await (await fetch("/runs")).json();
    if (j.error) throw new Error(j.error.message);
    ul.textContent = "";
    if (!j.runs.length) ul.textContent = "No training runs under the base folder.";
    for (const r of j.runs) {
      const li = document.createElement("li"); const btn = document.createElement("button");
      btn.textContent = r.kind + " " + r.tag + (r.last_step >= 0 ? " (step " + r.last_step + ")" : "");
      if (r.live) btn.className = "live";
      btn.onclick = () => showChart(r); li.appendChild(btn); ul.appendChild(li);
    }
  } catch (e) { ul.textContent = "Runs unavailable: " + (e.message || e); }
};
$("runsclose").onclick = () => { $("runs").classList.remove("open"); clearInterval(chartTimer); };

fetch("/v1/models").then(r => r.json()).then(j => { $("model").textContent = j.data[0].id; }).catch(() => {});
load(); renderAll(); $("input").focus();
</script>
</body>
</html>
)NCPAGE";
}  // namespace

const std::string& chat_page_html() {
  static const std::string page(kPage);
  return page;
}

}  // namespace nanochat::serve
