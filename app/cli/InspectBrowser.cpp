#include "InspectBrowser.hpp"

#include <algorithm>
#include <iostream>
#include <optional>

#include "InspectSections.hpp"
#include "TerminalSession.hpp"

namespace kvscope::cli {

namespace {

// One move through the audit; the message says why nothing moved ("" when it did).
std::string move(const Inspector& insp, const StepView& shown, InspectionPoint& p, const Key& k,
                 size_t& findingIndex) {
  const std::vector<int64_t> steps = insp.steps(p.request);
  const auto at = std::find(steps.begin(), steps.end(), p.step);
  const size_t i = at == steps.end() ? 0 : static_cast<size_t>(at - steps.begin());
  const char c = k.code == Key::Char ? k.c : 0;
  if (c == 'n' || c == ' ' || k.code == Key::Right) {
    if (i + 1 >= steps.size()) return "step " + std::to_string(p.step) + " is the request's last";
    p.step = steps[i + 1];
  } else if (c == 'p' || k.code == Key::Left) {
    if (i == 0) return "step " + std::to_string(p.step) + " is the request's first";
    p.step = steps[i - 1];
  } else if (c == 'j' || k.code == Key::Down) {
    if (p.layer + 1 >= insp.layers()) return "layer " + std::to_string(p.layer) + " is the last";
    ++p.layer;
  } else if (c == 'k' || k.code == Key::Up) {
    if (p.layer == 0) return "layer 0 is the first";
    --p.layer;
  } else if (c == 'h') {
    p.head = (shown.point.head + 1) % std::max<int64_t>(1, insp.kvHeads());
    p.autoHead = false;
  } else if (c == 'v') {
    p.kind = shown.point.kind == KvKind::Keys ? KvKind::Values : KvKind::Keys;
    p.autoKind = false;
  } else if (c == 'a') {
    p.autoHead = p.autoKind = true;
  } else if (c == 'r') {
    const std::vector<int64_t> requests = insp.requests();
    if (requests.size() < 2) return "the audit has one request";
    const auto r = std::find(requests.begin(), requests.end(), p.request);
    p.request = r == requests.end() || r + 1 == requests.end() ? requests.front() : *(r + 1);
    const std::vector<int64_t> its = insp.steps(p.request);
    const int64_t divergent = insp.timeline(p.request).divergentStep;
    p.step = divergent >= 0 ? divergent : (its.empty() ? 0 : its.front());
  } else if (c == 'g') {
    const auto& findings = insp.output().result.report.findings;
    if (findings.empty()) return "the audit has no findings";
    const InspectionPoint to = insp.locate(findings[findingIndex % findings.size()]);
    ++findingIndex;
    p.request = to.request;
    p.step = to.step;
    p.layer = to.layer;
    p.autoHead = p.autoKind = true;
  } else if (c == 'f') {
    if (const auto fd = insp.firstDivergence()) {
      p = *fd;
    } else {
      return "the audit is clean: no divergence";
    }
  } else {
    return "unknown key";
  }
  return "";
}

}  // namespace

std::string inspectKeysHelp() {
  return "q quit  n/p step  j/k layer  h head  v K/V  r request  g finding  f first";
}

void browseInspection(Inspector& insp, InspectionPoint start, const Style& style, int width,
                      int rows) {
  Lines last;
  {
    TerminalSession term;
    InspectionPoint p = start;
    std::optional<StepView> view;
    std::string status;
    size_t findingIndex = 0;
    bool dirty = true;
    auto layout = [&](const std::string& footer) {
      const int w = width > 0 ? std::min(width, term.width()) : term.width();
      const InspectFrame f{insp, *view, style, w, true};
      return compactInspectLayout(f, term.height(), rows, footer);
    };
    for (;;) {
      if (!view) view = insp.view(p);
      if (dirty) {
        term.draw(layout(status.empty() ? inspectKeysHelp() : status + "  (q quits)"));
        dirty = false;
      }
      const Key k = term.readKey(250);
      if (TerminalSession::takeResized()) dirty = true;
      if (k.code == Key::None) continue;
      if (k.code == Key::End || k.code == Key::Escape ||
          (k.code == Key::Char && (k.c == 'q' || k.c == 'Q' || k.c == 3 || k.c == 4)))
        break;
      const InspectionPoint before = p;
      status = move(insp, *view, p, k, findingIndex);
      if (p != before) {
        try {
          view = insp.view(p);
        } catch (const std::exception& e) {
          status = e.what();
          p = before;
        }
      }
      dirty = true;
    }
    last = layout("");
  }
  for (const auto& l : last) std::cout << l << "\n";
  std::cout << std::flush;
}

}  // namespace kvscope::cli
