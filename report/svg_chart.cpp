#include "report/svg_chart.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace kforge::pipeline {

namespace {

constexpr const char* palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf"};

/// A tick step of 1, 2 or 5 times a power of ten giving about `target` intervals over `span`.
double tick_step(double span, int target) {
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}

struct axis {
  double lo, hi, step;
};

/// The data range [lo, hi] widened to whole tick steps (and to a non-empty range).
axis nice_axis(double lo, double hi, int target) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double step = tick_step(hi - lo, target);
  return {std::floor(lo / step + 1e-9) * step, std::ceil(hi / step - 1e-9) * step, step};
}

std::vector<double> ticks_of(const axis& a) {
  std::vector<double> out;
  for (double v = a.lo; v <= a.hi + a.step * 1e-6; v += a.step)
    out.push_back(std::abs(v) < a.step * 1e-9 ? 0.0 : v);
  return out;
}

std::string fmt(double v) { return format_number(v, 6); }

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string format_number(double x, int digits) {
  if (!std::isfinite(x)) return std::isnan(x) ? "n/a" : (x > 0 ? "inf" : "-inf");
  if (x == 0) return "0";
  char buf[64];
  if (std::abs(x) >= 1e9)
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
  else if (std::abs(x) >= std::pow(10.0, digits))
    std::snprintf(buf, sizeof buf, "%.0f", x);
  else
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
  return buf;
}

bool has_points(const std::vector<chart_series>& series) {
  for (const auto& s : series)
    for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) return true;
  return false;
}

std::string svg_line_chart(const chart_spec& spec, const std::vector<chart_series>& series) {
  const double left = 64, right = 16, bottom = 42, w = spec.width;
  // The legend goes first, wrapping into as many rows as it needs; the plot takes what is left.
  struct legend_item {
    double x, y;
  };
  std::vector<legend_item> legend;
  double lx = left, ly = 10;
  for (const auto& s : series) {
    const double width = 16 + 7.0 * static_cast<double>(s.label.size()) + 18;
    if (lx > left && lx + width > w - right) {
      lx = left;
      ly += 17;
    }
    legend.push_back({lx, ly});
    lx += width;
  }
  const double top = ly + 20, h = spec.height + (ly - 10), pw = w - left - right,
               ph = h - top - bottom;

  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  for (const auto& s : series)
    for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      xmin = std::min(xmin, s.x[i]);
      xmax = std::max(xmax, s.x[i]);
      ymin = std::min(ymin, s.y[i]);
      ymax = std::max(ymax, s.y[i]);
    }
  if (!std::isfinite(xmin)) xmin = xmax = ymin = ymax = 0;
  if (spec.y_from_zero || spec.percent) ymin = std::min(ymin, 0.0);
  if (spec.percent) ymax = std::max(ymax, 0.01);  // all zero: still a readable 0..1% axis
  const axis xa = nice_axis(xmin, xmax, 6), ya = nice_axis(ymin, ymax, 5);
  const auto px = [&](double x) { return left + (x - xa.lo) / (xa.hi - xa.lo) * pw; };
  const auto py = [&](double y) { return top + ph - (y - ya.lo) / (ya.hi - ya.lo) * ph; };

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" << w << "\" height=\""
    << h << "\" viewBox=\"0 0 " << w << " " << h << "\" role=\"img\"><title>"
    << html_escape(spec.title) << "</title>\n";
  o << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"#fff\" stroke=\"#999\"/>\n";
  for (double t : ticks_of(ya)) {
    const double y = py(t);
    o << "<line x1=\"" << left << "\" y1=\"" << fmt(y) << "\" x2=\"" << left + pw << "\" y2=\""
      << fmt(y) << "\" stroke=\"#e4e4e4\"/><text x=\"" << left - 6 << "\" y=\"" << fmt(y + 4)
      << "\" text-anchor=\"end\">"
      << html_escape(spec.percent ? format_number(t * 100, 3) + "%" : format_number(t, 4))
      << "</text>\n";
  }
  for (double t : ticks_of(xa)) {
    const double x = px(t);
    o << "<line x1=\"" << fmt(x) << "\" y1=\"" << top + ph << "\" x2=\"" << fmt(x) << "\" y2=\""
      << top + ph + 4 << "\" stroke=\"#999\"/><text x=\"" << fmt(x) << "\" y=\"" << top + ph + 17
      << "\" text-anchor=\"middle\">" << html_escape(format_number(t, 4)) << "</text>\n";
  }
  o << "<text x=\"" << left + pw / 2 << "\" y=\"" << h - 6 << "\" text-anchor=\"middle\">"
    << html_escape(spec.x_label) << "</text>\n";
  o << "<text transform=\"translate(14," << top + ph / 2
    << ") rotate(-90)\" text-anchor=\"middle\">" << html_escape(spec.y_label) << "</text>\n";

  for (std::size_t k = 0; k < series.size(); ++k) {
    const auto& s = series[k];
    const char* colour = palette[k % (sizeof palette / sizeof *palette)];
    std::vector<std::pair<double, double>> pts;
    for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) pts.emplace_back(px(s.x[i]), py(s.y[i]));
    if (pts.size() > 1) {
      o << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"1.6\" points=\"";
      for (const auto& [x, y] : pts) o << fmt(x) << "," << fmt(y) << " ";
      o << "\"/>\n";
    }
    if (pts.size() <= 40)  // few points: mark each, so a lone one is visible too
      for (const auto& [x, y] : pts)
        o << "<circle cx=\"" << fmt(x) << "\" cy=\"" << fmt(y) << "\" r=\"2.5\" fill=\"" << colour
          << "\"/>";
    o << "<rect x=\"" << fmt(legend[k].x) << "\" y=\"" << fmt(legend[k].y)
      << "\" width=\"12\" height=\"12\" fill=\"" << colour << "\"/><text x=\""
      << fmt(legend[k].x + 16) << "\" y=\"" << fmt(legend[k].y + 10) << "\">"
      << html_escape(s.label) << "</text>\n";
  }
  o << "</svg>";
  return o.str();
}

}  // namespace kforge::pipeline
