#include "nanochat/serve/card_page.h"

#include <vector>

namespace nanochat::serve {

namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (const char ch : s) {
    if (ch == '<')
      out += "&lt;";
    else if (ch == '>')
      out += "&gt;";
    else if (ch == '&')
      out += "&amp;";
    else if (ch == '"')
      out += "&quot;";
    else
      out += ch;
  }
  return out;
}

// A chart file of a run folder as the server's chart route, else the target as written.
std::string link_target(const std::string& target) {
  static const std::pair<const char*, const char*> kinds[] = {
      {"/base_checkpoints/", "base"}, {"/chatsft_checkpoints/", "sft"}, {"/chatrl_checkpoints/", "rl"}};
  const std::string tail = "/report.svg";
  if (target.size() <= tail.size() || target.compare(target.size() - tail.size(), tail.size(), tail) != 0)
    return target;
  for (const auto& [folder, kind] : kinds) {
    const size_t at = target.rfind(folder);
    if (at == std::string::npos) continue;
    const size_t from = at + std::string(folder).size();
    const std::string tag = target.substr(from, target.size() - tail.size() - from);
    if (tag.empty() || tag.find('/') != std::string::npos) continue;
    return std::string("/runs/") + kind + "/" + tag + "/chart.svg";
  }
  return target;
}

// One line's inline markup: `code` and [text](target); the rest escaped.
std::string inline_html(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '`') {
      const size_t end = s.find('`', i + 1);
      if (end != std::string::npos) {
        out += "<code>" + escape(s.substr(i + 1, end - i - 1)) + "</code>";
        i = end + 1;
        continue;
      }
    }
    if (s[i] == '[') {
      const size_t close = s.find("](", i);
      const size_t end = close == std::string::npos ? close : s.find(')', close + 2);
      if (end != std::string::npos) {
        const std::string text = s.substr(i + 1, close - i - 1), target = s.substr(close + 2, end - close - 2);
        out += "<a href=\"" + escape(link_target(target)) + "\">" + escape(text) + "</a>";
        i = end + 1;
        continue;
      }
    }
    out += escape(std::string(1, s[i]));
    ++i;
  }
  return out;
}

// The cells of a table row "| a | b |".
std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> cells;
  size_t p = line.find('|') + 1;
  for (size_t bar; (bar = line.find('|', p)) != std::string::npos; p = bar + 1) {
    std::string c = line.substr(p, bar - p);
    while (!c.empty() && c.front() == ' ') c.erase(c.begin());
    while (!c.empty() && c.back() == ' ') c.pop_back();
    cells.push_back(c);
  }
  return cells;
}

}  // namespace

std::string card_page(const std::string& md) {
  std::string body;
  std::vector<std::string> lines;
  for (size_t p = 0; p <= md.size();) {
    const size_t nl = md.find('\n', p);
    lines.push_back(md.substr(p, nl == std::string::npos ? std::string::npos : nl - p));
    if (nl == std::string::npos) break;
    p = nl + 1;
  }
  for (size_t i = 0; i < lines.size();) {
    const std::string& l = lines[i];
    if (l.rfind("```", 0) == 0) {  // a code block, as it is
      body += "<pre>";
      for (++i; i < lines.size() && lines[i].rfind("```", 0) != 0; ++i) body += escape(lines[i]) + "\n";
      body += "</pre>\n";
      ++i;
    } else if (l.rfind("#", 0) == 0) {
      size_t level = l.find_first_not_of('#');
      const std::string text = level == std::string::npos ? "" : l.substr(level);
      level = std::min<size_t>(level == std::string::npos ? l.size() : level, 4);
      body += "<h" + std::to_string(level) + ">" + inline_html(text.empty() ? text : text.substr(1)) + "</h" +
              std::to_string(level) + ">\n";
      ++i;
    } else if (l.rfind("|", 0) == 0) {  // a table: its header, the separator row, its rows
      body += "<table>\n";
      bool header = true;
      for (; i < lines.size() && lines[i].rfind("|", 0) == 0; ++i) {
        const std::vector<std::string> cells = cells_of(lines[i]);
        if (!header && !cells.empty() && cells[0].find_first_not_of("-: ") == std::string::npos) continue;
        body += "<tr>";
        for (const auto& c : cells) body += (header ? "<th>" : "<td>") + inline_html(c) + (header ? "</th>" : "</td>");
        body += "</tr>\n";
        header = false;
      }
      body += "</table>\n";
    } else if (l.rfind("- ", 0) == 0) {
      body += "<ul>\n";
      for (; i < lines.size() && lines[i].rfind("- ", 0) == 0; ++i)
        body += "<li>" + inline_html(lines[i].substr(2)) + "</li>\n";
      body += "</ul>\n";
    } else if (l.empty()) {
      ++i;
    } else {  // a paragraph: lines up to a blank line or another block
      body += "<p>";
      for (bool first = true;
           i < lines.size() && !lines[i].empty() && lines[i].rfind("#", 0) != 0 && lines[i].rfind("|", 0) != 0 &&
           lines[i].rfind("- ", 0) != 0 && lines[i].rfind("```", 0) != 0;
           ++i, first = false)
        body += (first ? "" : "<br>\n") + inline_html(lines[i]);
      body += "</p>\n";
    }
  }
  return "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" "
         "content=\"width=device-width, initial-scale=1\"><title>report card</title><style>"
         "body{font-family:system-ui,sans-serif;max-width:960px;margin:1em auto;padding:0 1em;line-height:1.4}"
         "table{border-collapse:collapse;margin:.5em 0;display:block;overflow-x:auto}"
         "th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left}th{background:#f3f3f3}"
         "code,pre{background:#f6f6f6;font-size:.9em}pre{padding:.5em;overflow-x:auto}"
         "</style></head><body>\n<p><a href=\"/\">&larr; chat</a></p>\n" +
         body + "</body></html>\n";
}

}  // namespace nanochat::serve
