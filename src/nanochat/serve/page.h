#pragma once
// The chat page of `nanochat chat-web` (docs/architecture.md 10): one HTML document with its CSS
// and JavaScript inline, nothing fetched from elsewhere. It keeps conversations in the browser's
// localStorage (list on the left, "New chat"), sends the whole conversation to
// POST /v1/chat/completions with stream: true and appends each streamed piece to the answer as it
// arrives (one text node per piece), shows "Waiting for a free worker" while the server reports
// the request queued (": waiting N" SSE comments), stops an answer with "Stop" (aborting the
// request, which frees the worker), and has temperature / top-k / max-tokens controls and a "Runs"
// panel with the charts of the training runs (GET /runs, /runs/<kind>/<tag>/chart.svg).
// Element ids used by the browser test (tests/serve/page_test.cpp): input, send, stop, messages,
// status, convlist, newchat, temperature, topk, maxtokens.
#include <string>

namespace nanochat::serve {

/// The page (UTF-8 HTML).
const std::string& chat_page_html();

}  // namespace nanochat::serve
