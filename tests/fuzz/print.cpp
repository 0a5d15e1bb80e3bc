// print.cpp: the readable text of a Program (one line per node, sub-blocks indented; values of
// a sub-block are primed: v'3 is value 3 of a block nested once).
#include <algorithm>
#include <sstream>

#include "program.hpp"

namespace fuzz {

namespace {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

std::string ints_str(const std::vector<std::int64_t>& v) {
  std::string out = "(";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + ")";
}

void print_block(std::ostringstream& os, const Block& b, int indent, int depth) {
  std::string pad(static_cast<std::size_t>(indent), ' ');
  std::string p = "v" + std::string(static_cast<std::size_t>(depth), '\'');  // values of nested blocks get primes
  std::string outer = "v" + std::string(static_cast<std::size_t>(std::max(depth - 1, 0)), '\'');
  int k = 0;
  os << pad << "in";
  for (const auto& s : b.in) os << " " << p << k++ << ":" << shape_str(s);
  for (int c : b.captures) os << " " << p << k++ << "=" << outer << c << "(captured)";
  os << "\n";
  for (const auto& n : b.nodes) {
    os << pad;
    for (std::size_t o = 0; o < n.outs.size(); ++o) os << (o ? ", " : "") << p << k++ << ":" << shape_str(n.outs[o]);
    os << " = " << op_name(n.op) << "[";
    bool first = true;
    auto param = [&](const std::string& s) {
      os << (first ? "" : " ") << s;
      first = false;
    };
    if (!n.ints.empty()) param("ints=" + ints_str(n.ints));
    if (!n.ints2.empty()) param("ints2=" + ints_str(n.ints2));
    if (n.c != 0) {
      std::ostringstream c;
      c.precision(17);
      c << n.c;
      param("c=" + c.str());
    }
    if (n.variant) param("variant=" + std::to_string(n.variant));
    if (n.flag) param("flag");
    if (n.narrowed_residuals) param("narrowed_residuals");
    if (!n.text.empty()) param("'" + n.text + "'");
    os << "](";
    for (std::size_t a = 0; a < n.args.size(); ++a) os << (a ? ", " : "") << p << n.args[a];
    os << ")";
    if (n.subs.empty()) {
      os << "\n";
      continue;
    }
    os << " {\n";
    for (std::size_t sb = 0; sb < n.subs.size(); ++sb) {
      if (sb) os << pad << "  ---\n";
      print_block(os, n.subs[sb], indent + 4, depth + 1);
    }
    os << pad << "}\n";
  }
  os << pad << "return";
  for (int o : b.outs) os << " " << p << o;
  os << "\n";
}

}  // namespace

std::string print(const Program& p) {
  std::ostringstream os;
  os << "program of seed " << p.seed << (p.features.has_while ? " (while)" : "")
     << (p.features.has_custom_vjp ? " (custom_vjp)" : "") << "\n";
  print_block(os, p.main, 2, 0);
  return os.str();
}

const char* op_name(Op op) {
  switch (op) {
#define XFUZZ_NAME(x) case Op::x: return #x;
    XFUZZ_NAME(Const) XFUZZ_NAME(Iota) XFUZZ_NAME(RandNormal) XFUZZ_NAME(Neg) XFUZZ_NAME(Sin) XFUZZ_NAME(Cos)
    XFUZZ_NAME(Tanh) XFUZZ_NAME(Logistic) XFUZZ_NAME(Softplus) XFUZZ_NAME(Gelu) XFUZZ_NAME(Exp) XFUZZ_NAME(Expm1)
    XFUZZ_NAME(Log1pSq) XFUZZ_NAME(LogOnePlusSq) XFUZZ_NAME(Rational) XFUZZ_NAME(SqrtOnePlusSq)
    XFUZZ_NAME(RsqrtOnePlusSq) XFUZZ_NAME(RecipOnePlusSq) XFUZZ_NAME(Square) XFUZZ_NAME(IntPow)
    XFUZZ_NAME(TanBounded) XFUZZ_NAME(Elementary) XFUZZ_NAME(PowScalar) XFUZZ_NAME(Squash) XFUZZ_NAME(ScaleShift)
    XFUZZ_NAME(CastRoundTrip) XFUZZ_NAME(StopGradient) XFUZZ_NAME(Name) XFUZZ_NAME(Abs) XFUZZ_NAME(Relu)
    XFUZZ_NAME(Sign) XFUZZ_NAME(Silu) XFUZZ_NAME(LogSigmoid) XFUZZ_NAME(Elu) XFUZZ_NAME(LeakyRelu) XFUZZ_NAME(Bitwise) XFUZZ_NAME(Logic)
    XFUZZ_NAME(Add) XFUZZ_NAME(Sub) XFUZZ_NAME(Mul) XFUZZ_NAME(DivSafe) XFUZZ_NAME(PowSafe)
    XFUZZ_NAME(Maximum) XFUZZ_NAME(Minimum) XFUZZ_NAME(SelectGt) XFUZZ_NAME(Atan2) XFUZZ_NAME(RemSafe) XFUZZ_NAME(NextAfter) XFUZZ_NAME(LogAddExp) XFUZZ_NAME(Sum) XFUZZ_NAME(Mean)
    XFUZZ_NAME(Max) XFUZZ_NAME(Min) XFUZZ_NAME(ProdPos) XFUZZ_NAME(LogSumExp) XFUZZ_NAME(Softmax)
    XFUZZ_NAME(LogSoftmax) XFUZZ_NAME(Var) XFUZZ_NAME(Cumulative) XFUZZ_NAME(Sort) XFUZZ_NAME(Window) XFUZZ_NAME(Matmul) XFUZZ_NAME(Dot) XFUZZ_NAME(Einsum) XFUZZ_NAME(DotGeneral)
    XFUZZ_NAME(Cholesky) XFUZZ_NAME(TriangularSolve) XFUZZ_NAME(ChoSolve) XFUZZ_NAME(Lu) XFUZZ_NAME(Solve) XFUZZ_NAME(LuSolve) XFUZZ_NAME(Inv) XFUZZ_NAME(Slogdet) XFUZZ_NAME(Qr) XFUZZ_NAME(Eigh) XFUZZ_NAME(Svd) XFUZZ_NAME(Conv)
    XFUZZ_NAME(Reshape) XFUZZ_NAME(Transpose) XFUZZ_NAME(Flip) XFUZZ_NAME(BroadcastTo) XFUZZ_NAME(ExpandDims)
    XFUZZ_NAME(Squeeze) XFUZZ_NAME(Concat) XFUZZ_NAME(Stack) XFUZZ_NAME(Slice) XFUZZ_NAME(DynSlice)
    XFUZZ_NAME(DynUpdateSlice) XFUZZ_NAME(Take) XFUZZ_NAME(Index) XFUZZ_NAME(Fit) XFUZZ_NAME(At)
    XFUZZ_NAME(TakeAlongAxis) XFUZZ_NAME(Norm) XFUZZ_NAME(Loss) XFUZZ_NAME(Checkpoint)
    XFUZZ_NAME(Scan) XFUZZ_NAME(ForiLoop) XFUZZ_NAME(While) XFUZZ_NAME(Cond) XFUZZ_NAME(Switch)
    XFUZZ_NAME(Jit) XFUZZ_NAME(CustomJvp) XFUZZ_NAME(CustomVjp) XFUZZ_NAME(InnerGrad) XFUZZ_NAME(Count_)
#undef XFUZZ_NAME
  }
  return "?";
}

bool is_wrapper(Op op) { return op >= Op::Checkpoint && op < Op::Count_; }

}  // namespace fuzz
