#include "nanochat/serve/page.h"

#include "nanochat/serve/page_parts.h"

namespace nanochat::serve {

namespace {
// The page is plain HTML/CSS/JS so that it works offline and from a bare binary.
const char* const kHead = R"NCPAGE(<!doctype html>
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
#side header { padding: 12px; display: flex; flex-wrap: wrap; gap: 8px; }
#side header button { white-space: nowrap; }
#convlist { flex: 1; overflow-y: auto; list-style: none; margin: 0; padding: 0 8px 8px; }
#convlist li { padding: 6px 6px 6px 10px; border-radius: 8px; cursor: pointer; display: flex; align-items: center; gap: 6px; }
#convlist li span { flex: 1; min-width: 0; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
#convlist li.active { background: var(--user); }
#convlist li .del { color: var(--muted); border: 0; background: none; cursor: pointer; padding: 0 4px; }
#main { flex: 1; display: flex; flex-direction: column; min-width: 0; }
#top { display: flex; align-items: center; gap: 10px; padding: 8px 14px; border-bottom: 1px solid var(--line); background: var(--panel); flex-wrap: wrap; }
#top .title { font-weight: 600; }
#top .model { color: var(--muted); font-size: 13px; }
#top #cardlink { color: var(--accent); font-size: 13px; text-decoration: none; }
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
.msg .retry { margin-top: 6px; padding: 3px 10px; font-size: 13px; }
.tool { display: block; margin: 6px 0; padding: 6px 10px; border: 1px solid var(--line); border-left: 3px solid var(--accent); border-radius: 8px; background: var(--bg); font: 13px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; white-space: pre-wrap; }
.tool .label { display: block; color: var(--muted); font: 12px system-ui, sans-serif; }
.tool .result { font-weight: 600; }
#hint { margin: auto; max-width: 420px; text-align: center; color: var(--muted); }
#hint b { display: block; color: var(--text); font-size: 18px; margin-bottom: 6px; }
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
#runs li button.chosen { border-color: var(--accent); }
#runs li button.finished::after { content: " \2713"; color: var(--muted); }
#chart { overflow-x: auto; }
#runs img { display: block; width: 100%; background: #fff; }
@media (max-width: 700px) {
  #side { position: fixed; inset: 0 30% 0 0; z-index: 5; transform: translateX(-105%); transition: transform .2s; }
  body.menu #side { transform: none; box-shadow: 0 0 30px rgba(0,0,0,.2); }
  #menu { display: inline-block; }
  .msg { max-width: 92%; }
  #top { padding: 6px 10px; gap: 6px; }
  #settings { gap: 6px; font-size: 12px; }
  #settings input { width: 52px; }
  #composer { padding: 8px 10px 10px; }
  #input { min-width: 0; font-size: 16px; }
  #runs { inset: 8px 8px auto 8px; max-height: calc(100vh - 16px); }
  #runs img { width: auto; min-width: 720px; max-width: none; }
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
    <span class="title">nanochat</span><span class="model" id="model"></span><a id="cardlink" href="/report" target="_blank" rel="noopener" title="the report card of the model served: its training run, stage by stage">report card</a>
    <span class="spacer"></span>
    <div id="settings">
      <label>temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="0.8"></label>
      <label>top-k <input id="topk" type="number" min="0" max="1000" step="1" value="50"></label>
      <label>max tokens <input id="maxtokens" type="number" min="1" max="2048" step="1" value="512"></label>
    </div>
  </div>
  <div id="messages" aria-live="polite"></div>
  <div id="status"></div>
  <form id="composer">
    <textarea id="input" rows="1" placeholder="Message nanochat"></textarea>
    <button id="send" class="primary" type="submit">Send</button>
    <button id="stop" type="button">Stop</button>
  </form>
</div>
<div id="runs"><div style="display:flex;justify-content:space-between;align-items:center"><b>Training runs</b><button id="runsclose" type="button">Close</button></div><ul id="runlist"></ul><div id="chart"></div></div>
<script>
)NCPAGE";
const char* const kTail = "</script>\n</body>\n</html>\n";
}  // namespace

const std::string& chat_page_html() {
  static const std::string page = std::string(kHead) + page_chat_script() + page_runs_script() + kTail;
  return page;
}

}  // namespace nanochat::serve
