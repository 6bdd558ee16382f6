#pragma once
// The report card (road/card.h) as chat-web's `/report` page: the card's markdown turned into HTML
// (headings, tables, lists, paragraphs, code spans and blocks, links), every text escaped. A chart
// link to a training run's report.svg under <base>/{base,chatsft,chatrl}_checkpoints/<tag>/ points
// to the server's own chart of that run (`/runs/<base|sft|rl>/<tag>/chart.svg`), which a browser can
// open; other links are kept as written.
#include <string>

namespace nanochat::serve {

/// The whole page (a UTF-8 HTML document) of the card `markdown`, with a link back to the chat.
std::string card_page(const std::string& markdown);

}  // namespace nanochat::serve
