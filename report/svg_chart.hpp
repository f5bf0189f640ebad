#pragma once
// Small line charts as inline SVG, and HTML escaping, for `kforge report`: the report is one file
// that opens anywhere offline, so it carries its charts as markup rather than a plotting library.

#include <string>
#include <string_view>
#include <vector>

namespace kforge::pipeline {

/// `text` with & < > " ' replaced by entities: safe in element content and quoted attributes.
std::string html_escape(std::string_view text);

/// A number for people: up to `digits` significant digits, no exponent below 1e9, no trailing
/// zeros ("2.5", "1200", "0.0031").
std::string format_number(double x, int digits = 4);

struct chart_series {
  std::string label;
  std::vector<double> x, y;  ///< same length; non-finite points are skipped
};

struct chart_spec {
  std::string title;  ///< the SVG's accessible <title>
  std::string x_label;
  std::string y_label;
  bool y_from_zero = true;  ///< the y axis starts at 0 (or below, for negative values)
  bool percent = false;  ///< y values are fractions, labelled in %: axis from 0 to the data's max
  int width = 720, height = 260;  ///< pixels; a legend of more than one row adds to the height
};

/// Whether any series has a finite point to draw.
bool has_points(const std::vector<chart_series>& series);

/// An <svg> line chart of `series` (one colour each, legend on top, axes with rounded ticks).
/// Only meaningful when has_points(series); with nothing to draw it is an empty frame.
std::string svg_line_chart(const chart_spec& spec, const std::vector<chart_series>& series);

}  // namespace kforge::pipeline
