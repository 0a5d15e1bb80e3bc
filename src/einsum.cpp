// einsum: NumPy's / JAX's subscripts ("bij,bjk->bik"; an implicit output as in "ij,jk"; an
// ellipsis "...ij"; size-1 axes broadcast against their label's size) lowered to diagonals,
// sums, one dot_general per further operand (chosen greedily) and a transpose.

#include <algorithm>
#include <cctype>
#include <map>

#include "internal.hpp"
#include "xjax/ops.hpp"

namespace xjax {
namespace {

// One label per axis: the spec's letters, and for the axes an ellipsis covers the bytes 0x80 + k
// (k numbering the broadcast ellipsis axes from the left), which no letter can be.
using Labels = std::string;
constexpr std::size_t max_ellipsis_axes = 127;
char ellipsis_label(std::size_t k) { return static_cast<char>(0x80 + k); }
bool is_letter(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }
std::string label_name(char c) { return is_letter(c) ? "labelled '" + std::string(1, c) + "'" : "under the ellipsis"; }

// One operand's (or the output's) subscripts: letters, at most one "..." among them.
struct Term {
  std::string before, after;
  bool ellipsis = false;
  [[nodiscard]] std::size_t letters() const { return before.size() + after.size(); }
};

Term parse_term(const std::string& text, const std::string& spec) {
  Term t;
  const auto dots = text.find("...");
  t.ellipsis = dots != std::string::npos;
  t.before = text.substr(0, dots);
  if (t.ellipsis) t.after = text.substr(dots + 3);
  for (const std::string* part : {&t.before, &t.after})
    for (char c : *part)
      if (!is_letter(c))
        throw Error("einsum: spec " + spec + ": '" + std::string(1, c) +
                    "' is not a letter (letters, at most one '...' per operand, at most one '->')");
  return t;
}

struct Subscripts {
  std::vector<Labels> inputs;
  Labels output;
};

// Parses the spec against the operands' ranks: each ellipsis covers the axes its operand's
// letters leave, right-aligned with the widest (NumPy's broadcasting). Without "->" the output
// is the ellipsis then the letters named once, sorted (NumPy's implicit mode); an explicit
// output without "..." sums the ellipsis axes (opt_einsum's rule, which jnp.einsum follows).
Subscripts parse_subscripts(const std::string& spec, const std::vector<Array>& xs) {
  std::string s = spec;
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  const auto arrow = s.find("->");
  const bool implicit_output = arrow == std::string::npos;
  const std::string lhs = s.substr(0, arrow);
  std::vector<Term> terms;
  for (std::size_t start = 0;;) {
    const auto comma = lhs.find(',', start);
    terms.push_back(parse_term(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start), spec));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != xs.size())
    throw Error("einsum: spec " + spec + " names " + std::to_string(terms.size()) + " operands, got " + std::to_string(xs.size()));
  std::vector<std::size_t> widths;
  std::size_t width = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const auto rank = static_cast<std::size_t>(xs[i].ndim());
    if (terms[i].ellipsis ? terms[i].letters() > rank : terms[i].letters() != rank)
      throw ShapeError("einsum " + spec + ": operand " + std::to_string(i) + " " + xs[i].aval().str() + " does not match '" +
                       terms[i].before + (terms[i].ellipsis ? "..." : "") + terms[i].after + "'");
    widths.push_back(terms[i].ellipsis ? rank - terms[i].letters() : 0);
    width = std::max(width, widths.back());
  }
  if (width > max_ellipsis_axes) throw Error("einsum: spec " + spec + ": an ellipsis covers more than 127 axes");
  const auto ellipsis_labels = [width](std::size_t w) {
    Labels l;
    for (std::size_t k = width - w; k < width; ++k) l += ellipsis_label(k);
    return l;
  };
  Subscripts out;
  for (std::size_t i = 0; i < terms.size(); ++i) out.inputs.push_back(terms[i].before + ellipsis_labels(widths[i]) + terms[i].after);
  if (implicit_output) {
    std::map<char, int> uses;
    for (const Term& t : terms)
      for (char c : t.before + t.after) ++uses[c];
    out.output = ellipsis_labels(width);
    for (const auto& [c, n] : uses)
      if (n == 1) out.output += c;
    return out;
  }
  const Term o = parse_term(s.substr(arrow + 2), spec);
  out.output = o.before + (o.ellipsis ? ellipsis_labels(width) : "") + o.after;
  for (std::size_t i = 0; i < out.output.size(); ++i) {
    const char c = out.output[i];
    if (out.output.find(c, i + 1) != std::string::npos)
      throw Error("einsum: spec " + spec + ": the output names '" + std::string(1, c) + "' twice");
    if (std::none_of(out.inputs.begin(), out.inputs.end(), [c](const Labels& l) { return l.find(c) != std::string::npos; }))
      throw Error("einsum: spec " + spec + ": the output's '" + std::string(1, c) + "' is in no operand");
  }
  return out;
}

// lax.reduce_sum over ascending `axes` in x's own dtype: einsum's sums, as JAX's, keep integers'
// dtype (xj::sum widens them, as jnp.sum).
Array sum_in_dtype(const Array& x, const Axes& axes, const std::source_location& loc) {
  return detail::bind(Primitive::reduce_sum, std::span<const Array>(&x, 1), params::Reduce{.axes = axes}, loc)[0];
}

// A letter repeated within one operand ("ii", "iji") takes the diagonal of its axes (JAX's
// sum_repeats: the elements off it masked to zero, one of the axes summed out), until each
// letter labels one axis.
Array diagonal_of_repeats(Array x, Labels& labels, const std::string& spec, const std::source_location& loc) {
  for (std::size_t p = 0; p < labels.size(); ++p) {
    std::size_t q;
    while ((q = labels.find(labels[p], p + 1)) != std::string::npos) {
      if (x.shape()[p] != x.shape()[q])
        throw ShapeError("einsum " + spec + ": the axes " + label_name(labels[p]) + " of " + x.aval().str() +
                         " differ in size (at " + format_location(loc) + ")");
      const Array on_diagonal = eq(iota(i32, x.shape(), static_cast<std::int64_t>(p), loc),
                                   iota(i32, x.shape(), static_cast<std::int64_t>(q), loc), loc);
      x = sum_in_dtype(where(on_diagonal, x, zeros_like(x), loc), {static_cast<std::int64_t>(q)}, loc);
      labels.erase(q, 1);
    }
  }
  return x;
}

// Each label's size is the largest among its axes; an axis of size 1 broadcasts against it
// (squeezed here, as JAX's einsum drops it), any other disagreement is a ShapeError. Returns the
// sizes.
std::map<char, std::int64_t> broadcast_unit_axes(std::vector<Array>& xs, std::vector<Labels>& labels, const std::string& spec,
                                                 const std::source_location& loc) {
  std::map<char, std::int64_t> size;
  for (std::size_t i = 0; i < xs.size(); ++i)
    for (std::size_t a = 0; a < labels[i].size(); ++a) {
      const std::int64_t n = xs[i].shape()[a];
      auto [it, fresh] = size.emplace(labels[i][a], n);
      if (fresh || it->second == n || n == 1) continue;
      if (it->second != 1)
        throw ShapeError("einsum " + spec + ": the axes " + label_name(labels[i][a]) + " have sizes " + std::to_string(it->second) +
                         " and " + std::to_string(n) + " (operand " + std::to_string(i) + " " + xs[i].aval().str() + ", at " +
                         format_location(loc) + ")");
      it->second = n;
    }
  for (std::size_t i = 0; i < xs.size(); ++i) {
    Axes unit;
    Labels kept;
    for (std::size_t a = 0; a < labels[i].size(); ++a) {
      if (xs[i].shape()[a] == 1 && size[labels[i][a]] != 1) unit.push_back(static_cast<std::int64_t>(a));
      else kept += labels[i][a];
    }
    if (unit.empty()) continue;
    xs[i] = squeeze(xs[i], unit, loc);
    labels[i] = kept;
  }
  return size;
}

// The labels of a and b, each once.
Labels label_union(const Labels& a, const Labels& b) {
  Labels u = a;
  for (char c : b)
    if (u.find(c) == std::string::npos) u += c;
  return u;
}

// Sums out the labels of x that are not in `keep`.
Array sum_labels(const Array& x, Labels& labels, const Labels& keep, const std::source_location& loc) {
  Axes ax;
  Labels rest;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (keep.find(labels[i]) == std::string::npos) ax.push_back(static_cast<std::int64_t>(i));
    else rest += labels[i];
  }
  labels = rest;
  return ax.empty() ? x : sum_in_dtype(x, ax, loc);
}

// Contracts x with y: labels both have and `later` (the output, the operands still to come)
// needs are batch dimensions, the other shared ones are contracted; x's labels become the
// product's (batch, x's own, y's own).
Array contract(const Array& x, Labels& lx, const Array& y, const Labels& ly, const Labels& later, const std::source_location& loc) {
  Axes lc, rc, lbat, rbat;
  Labels batch, x_own, y_own;
  for (std::size_t i = 0; i < lx.size(); ++i) {
    const auto j = ly.find(lx[i]);
    if (j == std::string::npos) {
      x_own += lx[i];
      continue;
    }
    const bool needed = later.find(lx[i]) != std::string::npos;
    (needed ? lbat : lc).push_back(static_cast<std::int64_t>(i));
    (needed ? rbat : rc).push_back(static_cast<std::int64_t>(j));
    if (needed) batch += lx[i];
  }
  for (char c : ly)
    if (lx.find(c) == std::string::npos) y_own += c;
  lx = batch + x_own + y_own;
  return dot_general(x, y, lc, rc, lbat, rbat, loc);
}

// The operand to contract with x next: the one whose product with x (after the sums) is the
// smallest, the earliest among equals (a greedy path, as opt_einsum's greedy; left to right, "ij,
// kl,jk->il" made a [300,300,300,300] product of two 300x300 matrices first).
std::size_t next_operand(const Labels& lx, const std::vector<Labels>& rest, const Labels& output,
                         const std::map<char, std::int64_t>& size) {
  std::size_t best = 0;
  double best_elements = 0;
  for (std::size_t j = 0; j < rest.size(); ++j) {
    Labels later = output;
    for (std::size_t k = 0; k < rest.size(); ++k)
      if (k != j) later += rest[k];
    double elements = 1;
    for (char c : label_union(lx, rest[j]))
      if (later.find(c) != std::string::npos) elements *= static_cast<double>(size.at(c));
    if (j == 0 || elements < best_elements) {
      best = j;
      best_elements = elements;
    }
  }
  return best;
}

Array permute_to(const Array& x, const Labels& labels, const Labels& out, const std::source_location& loc) {
  Axes perm;
  for (char c : out) perm.push_back(static_cast<std::int64_t>(labels.find(c)));
  bool identity = true;
  for (std::size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<std::int64_t>(i);
  return identity ? x : transpose(x, perm, loc);
}

}  // namespace

Array einsum(const std::string& spec, const std::vector<Array>& operands, std::source_location loc) {
  if (operands.empty()) throw Error("einsum: spec " + spec + " with no operands");
  Subscripts s = parse_subscripts(spec, operands);
  // Mixed dtypes promote first, as a product's operands (weakly typed ones adopt the others'
  // dtype; strict mode raises), so that the sums below run in the result's dtype; bools compute
  // as the OR of ANDs (JAX's), here a count in i64 compared with zero.
  std::vector<Array> xs = detail::promoted_operands(Primitive::dot_general, operands, loc);
  const bool all_bool = xs[0].dtype() == bool_;
  if (all_bool)
    for (Array& x : xs) x = astype(x, i64, loc);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = diagonal_of_repeats(xs[i], s.inputs[i], spec, loc);
  const std::map<char, std::int64_t> size = broadcast_unit_axes(xs, s.inputs, spec, loc);
  Array x = xs[0];
  Labels lx = s.inputs[0];
  std::vector<Array> rest(xs.begin() + 1, xs.end());
  std::vector<Labels> rest_labels(s.inputs.begin() + 1, s.inputs.end());
  while (!rest.empty()) {
    const std::size_t j = next_operand(lx, rest_labels, s.output, size);
    const Array y_in = rest[j];
    Labels ly = rest_labels[j];
    rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(j));
    rest_labels.erase(rest_labels.begin() + static_cast<std::ptrdiff_t>(j));
    Labels later = s.output;
    for (const Labels& l : rest_labels) later += l;
    // labels only one side has and nothing later needs are summed before the product
    x = sum_labels(x, lx, ly + later, loc);
    const Array y = sum_labels(y_in, ly, lx + later, loc);
    x = contract(x, lx, y, ly, later, loc);
  }
  x = sum_labels(x, lx, s.output, loc);
  x = permute_to(x, lx, s.output, loc);
  return all_bool ? ne(x, zeros_like(x), loc) : x;
}

Array einsum(const std::string& spec, const Array& a, const Array& b, std::source_location loc) { return einsum(spec, {a, b}, loc); }
Array einsum(const std::string& spec, const Array& a, std::source_location loc) { return einsum(spec, std::vector<Array>{a}, loc); }

}  // namespace xjax
