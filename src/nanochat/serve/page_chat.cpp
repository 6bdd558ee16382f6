// The chat part of the page's script (serve/page.h): conversations in localStorage, the request,
// the streamed answer, failed turns, calculator blocks and the limits the server reports.
#include "nanochat/serve/page_parts.h"

namespace nanochat::serve {

namespace {
const char* const kScript = R"NCJS("use strict";
const $ = (id) => document.getElementById(id);
const KEY = "nanochat.conversations";
let convs = [];
let current = null;
let controller = null;
let maxTokens = 2048;  // the server's bound (GET /health limits.max_tokens) once read

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

// The API's text carries a calculator call as "\n```calculator\n<expr>\n```\n" and its result as
// "```output\n<result>\n```\n" (serve/tool_text.h); split it into text and tool segments.
const CALL = "\n```calculator\n", OUT = "```output\n", CLOSE = "\n```\n";
function blockBody(text, at) {
  const close = text.indexOf(CLOSE, at);
  if (close < 0) { let body = text.slice(at); if (body.endsWith("\n```")) body = body.slice(0, -4); return [body, text.length]; }
  return [text.slice(at, close), close + CLOSE.length];
}
function segments(text) {
  const out = [];
  let at = 0;
  for (;;) {
    const call = text.indexOf(CALL, at);
    if (call < 0) break;
    if (call > at) out.push({ text: text.slice(at, call) });
    let expr, result = null;
    [expr, at] = blockBody(text, call + CALL.length);
    if (text.startsWith(OUT, at)) [result, at] = blockBody(text, at + OUT.length);
    out.push({ expr, result });
  }
  if (at < text.length) out.push({ text: text.slice(at) });
  return out;
}
function toolBlock(seg) {
  const d = document.createElement("span"); d.className = "tool";
  const l = document.createElement("span"); l.className = "label"; l.textContent = "calculator"; d.appendChild(l);
  const e = document.createElement("span"); e.className = "expr"; e.textContent = seg.expr; d.appendChild(e);
  if (seg.result !== null) {
    d.appendChild(document.createTextNode(" = "));
    const r = document.createElement("span"); r.className = "result"; r.textContent = seg.result; d.appendChild(r);
  }
  return d;
}
function fillText(span, text) {
  span.textContent = "";
  for (const seg of segments(text)) span.appendChild("text" in seg ? document.createTextNode(seg.text) : toolBlock(seg));
}
function note(b, text) { const n = document.createElement("span"); n.className = "note"; n.textContent = text; b.appendChild(n); }
function bubble(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  const span = document.createElement("span"); span.className = "text";
  if (text) fillText(span, text);
  div.appendChild(span);
  $("messages").appendChild(div);
  return div;
}
// A failed answer stays on screen but it and the question it failed to answer are left out of
// what is sent next (the server's turns alternate user, assistant); "Retry" asks it again.
function retryButton(b, c, i) {
  const r = document.createElement("button"); r.type = "button"; r.className = "retry"; r.textContent = "Retry";
  r.onclick = () => {
    if (controller) return;
    const q = c.messages[i - 1];
    c.messages.splice(i - 1, 2); save();
    send(q && q.role === "user" ? q.content : "");
  };
  b.appendChild(r);
}
function showHint() {
  const h = document.createElement("div"); h.id = "hint";
  h.innerHTML = "<b>Ask nanochat anything</b>Try \u201cWhat is 37*91?\u201d: the model can use a calculator. Enter sends, Shift+Enter starts a new line; your chats stay in this browser.";
  $("messages").appendChild(h);
}
function renderMessages() {
  const box = $("messages"); box.textContent = "";
  const c = conv();
  if (!c || !c.messages.length) { showHint(); return; }
  c.messages.forEach((m, i) => {
    const b = bubble(m.role, m.content);
    if (m.error) b.classList.add("error");
    if (m.note) note(b, m.note);
    if (m.error) { note(b, "(left out of the conversation)"); if (i === c.messages.length - 1) retryButton(b, c, i); }
  });
  box.scrollTop = box.scrollHeight;
}
function renderAll() { renderList(); renderMessages(); }
function setStatus(s) { $("status").textContent = s; }
function num(id, lo, hi, def) { const v = Number($(id).value); return Number.isFinite(v) ? Math.min(hi, Math.max(lo, v)) : def; }
function sendable(msgs) {
  return msgs.filter((m, i) => !m.error && !(m.role === "user" && msgs[i + 1] && msgs[i + 1].error))
             .map(m => ({ role: m.role, content: m.content }));
}
)NCJS"
                            R"NCJS(
// Reads the SSE stream into the answer; the bubble's text is redrawn when a calculator block
// appears, else each piece is its own text node as it arrives.
async function readStream(res, answer, span) {
  const box = $("messages");
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut); buf = buf.slice(cut + 2);
      for (const line of block.split("\n")) {
        if (line.startsWith(": waiting")) { setStatus("Waiting for a free worker (" + line.slice(10) + " in line)\u2026"); continue; }
        if (line.startsWith(":")) { setStatus("Generating\u2026"); continue; }
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        setStatus("Generating\u2026");
        const ch = j.choices && j.choices[0];
        if (ch && ch.delta && ch.delta.content) {
          answer.content += ch.delta.content;
          if (answer.content.includes("```")) fillText(span, answer.content);
          else span.appendChild(document.createTextNode(ch.delta.content));
          box.scrollTop = box.scrollHeight;
        }
        if (ch && ch.finish_reason === "length") answer.note = "(cut at the token limit)";
      }
    }
  }
}

async function send(text) {
  if (controller || !text.trim()) return;
  const c = conv() || newConv();
  if (!c.messages.length) c.title = text.slice(0, 40);
  c.messages.push({ role: "user", content: text });
  const answer = { role: "assistant", content: "" };
  save(); renderAll();
  const b = bubble("assistant", "");
  const span = b.querySelector(".text");
  document.body.classList.add("busy");
  setStatus("Sending\u2026");
  controller = new AbortController();
  const body = {
    messages: sendable(c.messages),
    temperature: num("temperature", 0, 2, 0.8), top_k: Math.round(num("topk", 0, 1000, 50)),
    max_tokens: Math.round(num("maxtokens", 1, maxTokens, Math.min(512, maxTokens))), stream: true,
  };
  let failed = null;
  try {
    const res = await fetch("/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body), signal: controller.signal });
    if (!res.ok) {
      let msg = "HTTP " + res.status;
      try { msg = (await res.json()).error.message; } catch (e) {}
      throw new Error(msg);
    }
    await readStream(res, answer, span);
  } catch (e) {
    if (e.name === "AbortError") answer.note = "(stopped)";
    else failed = e.message || String(e);
  }
  controller = null;
  document.body.classList.remove("busy");
  setStatus("");
  if (failed) {
    answer.content = (answer.content ? answer.content + "\n" : "") + "Error: " + failed;
    answer.error = true;
  }
  c.messages.push(answer);
  save(); renderAll();
  $("input").focus();
}

$("composer").addEventListener("submit", (ev) => { ev.preventDefault(); const t = $("input").value; $("input").value = ""; send(t); });
$("input").addEventListener("keydown", (ev) => { if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("composer").requestSubmit(); } });
$("stop").onclick = () => { if (controller) controller.abort(); };
$("newchat").onclick = () => { if (controller) return; const c = conv(); if (!c || c.messages.length) newConv(); document.body.classList.remove("menu"); renderAll(); $("input").focus(); };
$("menu").onclick = () => document.body.classList.toggle("menu");
$("maxtokens").addEventListener("change", () => { $("maxtokens").value = Math.round(num("maxtokens", 1, maxTokens, 512)); });

fetch("/v1/models").then(r => r.json()).then(j => { $("model").textContent = j.data[0].id; }).catch(() => {});
fetch("/health").then(r => r.json()).then(j => {
  if (!j.limits || !(j.limits.max_tokens >= 1)) return;
  maxTokens = j.limits.max_tokens;
  const box = $("maxtokens");
  box.max = String(maxTokens);
  box.title = "at most " + maxTokens + " (this server's limit)";
  if (Number(box.value) > maxTokens) box.value = String(maxTokens);
}).catch(() => {});
load(); renderAll(); $("input").focus();
)NCJS";
}  // namespace

const char* page_chat_script() { return kScript; }

}  // namespace nanochat::serve
