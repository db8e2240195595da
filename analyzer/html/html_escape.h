// Text for HTML and SVG: every string that comes from a trace (commands,
// paths, thread names, a finding's words) goes through HtmlEscape before it
// is written into the page, in element content and in attribute values alike.
#pragma once

#include <string>
#include <string_view>

namespace pinscope::html {

// & < > " ' as character references; invalid UTF-8 bytes as U+FFFD, and
// control characters other than tab and newline dropped, so the page stays
// well formed whatever the trace holds.
std::string HtmlEscape(std::string_view text);

// A number for an SVG attribute: fixed, at most two decimals, "C" locale.
std::string SvgNumber(double value);

}  // namespace pinscope::html
