// The "Runs" part of the page's script (serve/page.h): while the panel is open the run list and
// the chosen run's chart are fetched again every 5 s, in place, so that the panel keeps its scroll
// position (a new chart replaces the old one only once it has loaded).
#include "nanochat/serve/page_parts.h"

namespace nanochat::serve {

namespace {
const char* const kScript = R"NCJS(
const RUNS_EVERY_MS = 5000;
let runsTimer = null;
let chosenRun = null;
const runKey = (r) => r.kind + "/" + r.tag;
function chartUrl(r) { return "/runs/" + encodeURIComponent(r.kind) + "/" + encodeURIComponent(r.tag) + "/chart.svg"; }
function drawChart() {
  if (!chosenRun) return;
  const box = $("chart");
  const img = new Image();
  img.alt = chosenRun.kind + " " + chosenRun.tag;
  img.onload = () => {
    const runs = $("runs"), top = runs.scrollTop, left = box.scrollLeft;
    const old = box.querySelector("img");
    if (old) box.replaceChild(img, old); else { box.textContent = ""; box.appendChild(img); }
    runs.scrollTop = top; box.scrollLeft = left;
  };
  img.onerror = () => { if (!box.querySelector("img")) box.textContent = "Chart unavailable."; };
  img.src = chartUrl(chosenRun) + "?t=" + Date.now();
}
function runLabel(r) {
  return r.kind + " " + r.tag + (r.last_step >= 0 ? " (step " + r.last_step + ")" : "");
}
async function refreshRuns() {
  const ul = $("runlist");
  try {
    const j = await (await fetch("/runs")).json();
    if (j.error) throw new Error(j.error.message);
    const items = [];
    for (const r of j.runs) {
      const li = document.createElement("li"); const btn = document.createElement("button");
      btn.type = "button"; btn.textContent = runLabel(r); btn.dataset.run = runKey(r);
      if (r.live) btn.classList.add("live");
      if (r.finished) { btn.classList.add("finished"); btn.title = "finished"; }
      if (chosenRun && runKey(chosenRun) === runKey(r)) btn.classList.add("chosen");
      btn.onclick = () => { chosenRun = r; for (const b of ul.querySelectorAll("button")) b.classList.toggle("chosen", b === btn); $("chart").textContent = "Loading\u2026"; drawChart(); };
      li.appendChild(btn); items.push(li);
    }
    ul.replaceChildren(...items);
    if (!j.runs.length) ul.textContent = "No training runs under the base folder.";
  } catch (e) { ul.textContent = "Runs unavailable: " + (e.message || e); }
}
function runsTick() { refreshRuns(); drawChart(); }
$("runsbtn").onclick = () => {
  document.body.classList.remove("menu");  // the drawer would stay open behind the panel
  $("runs").classList.add("open");
  if (!$("runlist").children.length) $("runlist").textContent = "Loading\u2026";
  clearInterval(runsTimer);
  refreshRuns();
  runsTimer = setInterval(runsTick, RUNS_EVERY_MS);
};
$("runsclose").onclick = () => { $("runs").classList.remove("open"); clearInterval(runsTimer); runsTimer = null; };
)NCJS";
}  // namespace

const char* page_runs_script() { return kScript; }

}  // namespace nanochat::serve
