#pragma once
// The page's inline scripts (serve/page.h), one part per concern; page.cpp joins them after the
// HTML and CSS. Internal to serve/.

namespace nanochat::serve {

/// Conversations, sending, streaming, failed turns, tool blocks, limits from GET /health.
const char* page_chat_script();
/// The "Runs" panel: run list and chart, both refreshed while open.
const char* page_runs_script();

}  // namespace nanochat::serve
