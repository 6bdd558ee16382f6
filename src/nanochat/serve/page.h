#pragma once
// The chat page of `nanochat chat-web` (docs/architecture.md 10): one HTML document with its CSS
// and JavaScript inline, nothing fetched from elsewhere. It keeps conversations in the browser's
// localStorage (list on the left, "New chat"), sends the whole conversation to
// POST /v1/chat/completions with stream: true and appends each streamed piece to the answer as it
// arrives (one text node per piece; calculator blocks, serve/tool_text.h, drawn as a tool block),
// shows "Waiting for a free worker" while the server reports the request queued (": waiting N"
// SSE comments), stops an answer with "Stop" (aborting the request, which frees the worker), keeps
// a failed answer on screen but out of later requests (with "Retry"), and has temperature / top-k
// / max-tokens controls (max tokens bounded by GET /health's limits), a hint on an empty chat and a
// "Runs" panel with the charts of the training runs (GET /runs, /runs/<kind>/<tag>/chart.svg),
// both refreshed every 5 s while open, and a "report card" link beside the model's name (GET /report). Parts: page.cpp
// (HTML, CSS), page_chat.cpp, page_runs.cpp. Element ids and classes used by the browser tests
// (tests/serve/page_*test.cpp): input, send, stop, messages, status, convlist, newchat, temperature, topk, maxtokens,
// hint, menu, runsbtn, cardlink, runs, runlist, chart; .msg, .error, .note, .retry, .tool .expr / .result.
#include <string>

namespace nanochat::serve {

/// The page (UTF-8 HTML).
const std::string& chat_page_html();

}  // namespace nanochat::serve
