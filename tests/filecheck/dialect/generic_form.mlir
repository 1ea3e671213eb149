// The generic form (--print-op-generic) of every tw op: operands, properties <{...}>,
// discardable attributes {...} and the function type.
// RUN: tw-opt %s --split-input-file --print-op-generic | filecheck %s

builtin.module {
  tw.graph @graph attributes {tw.annotation = "top"} {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    tw.output "y" %x : !tw.vec<1>
  }
  tw.graph @empty {
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "graph"}> ({
// CHECK-NEXT: %x = "tw.input"() <{name = "x", range = #tw.range<-1.0, 1.0>}> : () -> !tw.vec<1>
// CHECK-NEXT: "tw.output"(%x) <{name = "y"}> : (!tw.vec<1>) -> ()
// CHECK-NEXT: }) {tw.annotation = "top"} : () -> ()
// CHECK-NEXT: "tw.graph"() <{sym_name = "empty"}> ({
// CHECK-NEXT: ^bb0:
// CHECK-NEXT: }) : () -> ()

// -----

builtin.module {
  tw.graph @input {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
    %flag = tw.input "flag" <-1.0, 1.0> {tw.annotation = "control/flag"} : !tw.vec<1>
    tw.output "y" %x : !tw.vec<2>
    tw.output "f" %flag : !tw.vec<1>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "input"}> ({
// CHECK-NEXT: %x = "tw.input"() <{name = "x", range = #tw.range<-8.0, 8.0>}> : () -> !tw.vec<2>
// CHECK-NEXT: %flag = "tw.input"() <{name = "flag", range = #tw.range<-1.0, 1.0>}> {tw.annotation = "control/flag"} : () -> !tw.vec<1>
// CHECK-NEXT: "tw.output"(%x) <{name = "y"}> : (!tw.vec<2>) -> ()
// CHECK-NEXT: "tw.output"(%flag) <{name = "f"}> : (!tw.vec<1>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @output {
    %x = tw.input "x" <0.0, 1.0> : !tw.vec<3>
    tw.output "first" %x : !tw.vec<3>
    tw.output "again" %x : !tw.vec<3>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "output"}> ({
// CHECK-NEXT: %x = "tw.input"() <{name = "x", range = #tw.range<0.0, 1.0>}> : () -> !tw.vec<3>
// CHECK-NEXT: "tw.output"(%x) <{name = "first"}> : (!tw.vec<3>) -> ()
// CHECK-NEXT: "tw.output"(%x) <{name = "again"}> : (!tw.vec<3>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @embedding {
    %tok = tw.embedding "tokens" table dense<[[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]> : tensor<3x2xf32> : !tw.vec<2>
    tw.output "y" %tok : !tw.vec<2>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "embedding"}> ({
// CHECK-NEXT{LITERAL}: %tok = "tw.embedding"() <{name = "tokens", table = dense<[[0.000000e+00, 1.000000e+00], [2.000000e+00, 3.000000e+00], [4.000000e+00, 5.000000e+00]]> : tensor<3x2xf32>}> : () -> !tw.vec<2>
// CHECK-NEXT: "tw.output"(%tok) <{name = "y"}> : (!tw.vec<2>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @pos_encoding {
    %pos = tw.pos_encoding max_len 16 : !tw.vec<4>
    tw.output "p" %pos : !tw.vec<4>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "pos_encoding"}> ({
// CHECK-NEXT: %pos = "tw.pos_encoding"() <{max_len = 16 : i64}> : () -> !tw.vec<4>
// CHECK-NEXT: "tw.output"(%pos) <{name = "p"}> : (!tw.vec<4>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @pos_table {
    %pos = tw.pos_table table dense<[[0.0, 1.0], [1.0, 0.0]]> : tensor<2x2xf32> : !tw.vec<2>
    tw.output "p" %pos : !tw.vec<2>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "pos_table"}> ({
// CHECK-NEXT{LITERAL}: %pos = "tw.pos_table"() <{table = dense<[[0.000000e+00, 1.000000e+00], [1.000000e+00, 0.000000e+00]]> : tensor<2x2xf32>}> : () -> !tw.vec<2>
// CHECK-NEXT: "tw.output"(%pos) <{name = "p"}> : (!tw.vec<2>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @literal {
    %c = tw.literal dense<[1.0, -2.5]> : tensor<2xf32> : !tw.vec<2>
    %one = tw.literal dense<1.0> : tensor<3xf32> : !tw.vec<3>
    tw.output "c" %c : !tw.vec<2>
    tw.output "one" %one : !tw.vec<3>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "literal"}> ({
// CHECK-NEXT: %c = "tw.literal"() <{value = dense<[1.000000e+00, -2.500000e+00]> : tensor<2xf32>}> : () -> !tw.vec<2>
// CHECK-NEXT: %one = "tw.literal"() <{value = dense<1.000000e+00> : tensor<3xf32>}> : () -> !tw.vec<3>
// CHECK-NEXT: "tw.output"(%c) <{name = "c"}> : (!tw.vec<2>) -> ()
// CHECK-NEXT: "tw.output"(%one) <{name = "one"}> : (!tw.vec<3>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @linear {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
    %y = tw.linear %x weight dense<[[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]]> : tensor<2x3xf32> : !tw.vec<2> -> !tw.vec<3>
    %z = tw.linear %y weight dense<[[1.0], [1.0], [1.0]]> : tensor<3x1xf32> bias dense<0.5> : tensor<1xf32> : !tw.vec<3> -> !tw.vec<1>
    tw.output "z" %z : !tw.vec<1>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "linear"}> ({
// CHECK-NEXT: %x = "tw.input"() <{name = "x", range = #tw.range<-8.0, 8.0>}> : () -> !tw.vec<2>
// CHECK-NEXT{LITERAL}: %y = "tw.linear"(%x) <{weight = dense<[[1.000000e+00, 0.000000e+00, 2.000000e+00], [0.000000e+00, 1.000000e+00, -1.000000e+00]]> : tensor<2x3xf32>}> : (!tw.vec<2>) -> !tw.vec<3>
// CHECK-NEXT: %z = "tw.linear"(%y) <{weight = dense<1.000000e+00> : tensor<3x1xf32>, bias = dense<5.000000e-01> : tensor<1xf32>}> : (!tw.vec<3>) -> !tw.vec<1>
// CHECK-NEXT: "tw.output"(%z) <{name = "z"}> : (!tw.vec<1>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @relu {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
    %r = tw.relu %x : !tw.vec<2>
    tw.output "r" %r : !tw.vec<2>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "relu"}> ({
// CHECK-NEXT: %x = "tw.input"() <{name = "x", range = #tw.range<-8.0, 8.0>}> : () -> !tw.vec<2>
// CHECK-NEXT: %r = "tw.relu"(%x) : (!tw.vec<2>) -> !tw.vec<2>
// CHECK-NEXT: "tw.output"(%r) <{name = "r"}> : (!tw.vec<2>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @add {
    %a = tw.input "a" <-8.0, 8.0> : !tw.vec<2>
    %b = tw.input "b" <-8.0, 8.0> : !tw.vec<2>
    %s = tw.add %a, %b : !tw.vec<2>
    tw.output "s" %s : !tw.vec<2>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "add"}> ({
// CHECK-NEXT: %a = "tw.input"() <{name = "a", range = #tw.range<-8.0, 8.0>}> : () -> !tw.vec<2>
// CHECK-NEXT: %b = "tw.input"() <{name = "b", range = #tw.range<-8.0, 8.0>}> : () -> !tw.vec<2>
// CHECK-NEXT: %s = "tw.add"(%a, %b) : (!tw.vec<2>, !tw.vec<2>) -> !tw.vec<2>
// CHECK-NEXT: "tw.output"(%s) <{name = "s"}> : (!tw.vec<2>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @concat {
    %a = tw.input "a" <-8.0, 8.0> : !tw.vec<1>
    %b = tw.input "b" <-8.0, 8.0> : !tw.vec<2>
    %c = tw.concat(%a, %b, %a) : !tw.vec<1>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<4>
    tw.output "c" %c : !tw.vec<4>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "concat"}> ({
// CHECK-NEXT: %a = "tw.input"() <{name = "a", range = #tw.range<-8.0, 8.0>}> : () -> !tw.vec<1>
// CHECK-NEXT: %b = "tw.input"() <{name = "b", range = #tw.range<-8.0, 8.0>}> : () -> !tw.vec<2>
// CHECK-NEXT: %c = "tw.concat"(%a, %b, %a) : (!tw.vec<1>, !tw.vec<2>, !tw.vec<1>) -> !tw.vec<4>
// CHECK-NEXT: "tw.output"(%c) <{name = "c"}> : (!tw.vec<4>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @slice {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<8>
    %s = tw.slice %x[2] : !tw.vec<8> -> !tw.vec<3>
    %t = tw.slice %x[7] : !tw.vec<8> -> !tw.vec<1>
    tw.output "s" %s : !tw.vec<3>
    tw.output "t" %t : !tw.vec<1>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "slice"}> ({
// CHECK-NEXT: %x = "tw.input"() <{name = "x", range = #tw.range<-8.0, 8.0>}> : () -> !tw.vec<8>
// CHECK-NEXT: %s = "tw.slice"(%x) <{start = 2 : i64}> : (!tw.vec<8>) -> !tw.vec<3>
// CHECK-NEXT: %t = "tw.slice"(%x) <{start = 7 : i64}> : (!tw.vec<8>) -> !tw.vec<1>
// CHECK-NEXT: "tw.output"(%s) <{name = "s"}> : (!tw.vec<3>) -> ()
// CHECK-NEXT: "tw.output"(%t) <{name = "t"}> : (!tw.vec<1>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @after {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
    %t = tw.input "t" <-8.0, 8.0> : !tw.vec<1>
    %r = tw.relu %t : !tw.vec<1>
    %y = tw.after %x, (%t, %r) : !tw.vec<2>, !tw.vec<1>, !tw.vec<1>
    tw.output "y" %y : !tw.vec<2>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "after"}> ({
// CHECK-NEXT: %x = "tw.input"() <{name = "x", range = #tw.range<-8.0, 8.0>}> : () -> !tw.vec<2>
// CHECK-NEXT: %t = "tw.input"() <{name = "t", range = #tw.range<-8.0, 8.0>}> : () -> !tw.vec<1>
// CHECK-NEXT: %r = "tw.relu"(%t) : (!tw.vec<1>) -> !tw.vec<1>
// CHECK-NEXT: %y = "tw.after"(%x, %t, %r) : (!tw.vec<2>, !tw.vec<1>, !tw.vec<1>) -> !tw.vec<2>
// CHECK-NEXT: "tw.output"(%y) <{name = "y"}> : (!tw.vec<2>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @attn {
    %q = tw.input "q" <-1.0, 1.0> : !tw.vec<2>
    %v = tw.input "v" <-1.0, 1.0> : !tw.vec<1>
    %o = tw.attn %q, %q, %v wq dense<[[1.0], [0.0]]> : tensor<2x1xf32> wk dense<[[0.0], [1.0]]> : tensor<2x1xf32> wv dense<[[1.0, -1.0]]> : tensor<1x2xf32> wo dense<[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]> : tensor<2x3xf32> : !tw.vec<2>, !tw.vec<2>, !tw.vec<1> -> !tw.vec<3>
    tw.output "o" %o : !tw.vec<3>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "attn"}> ({
// CHECK-NEXT: %q = "tw.input"() <{name = "q", range = #tw.range<-1.0, 1.0>}> : () -> !tw.vec<2>
// CHECK-NEXT: %v = "tw.input"() <{name = "v", range = #tw.range<-1.0, 1.0>}> : () -> !tw.vec<1>
// CHECK-NEXT{LITERAL}: %o = "tw.attn"(%q, %q, %v) <{wq = dense<[[1.000000e+00], [0.000000e+00]]> : tensor<2x1xf32>, wk = dense<[[0.000000e+00], [1.000000e+00]]> : tensor<2x1xf32>, wv = dense<[[1.000000e+00, -1.000000e+00]]> : tensor<1x2xf32>, wo = dense<[[1.000000e+00, 0.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00, 0.000000e+00]]> : tensor<2x3xf32>}> : (!tw.vec<2>, !tw.vec<2>, !tw.vec<1>) -> !tw.vec<3>
// CHECK-NEXT: "tw.output"(%o) <{name = "o"}> : (!tw.vec<3>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @mlp {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
    %full = tw.mlp %x w1 dense<[[1.0, -1.0, 0.0], [0.0, 1.0, 1.0]]> : tensor<2x3xf32> b1 dense<[0.0, 1.0, -1.0]> : tensor<3xf32> w2 dense<[[1.0], [2.0], [3.0]]> : tensor<3x1xf32> b2 dense<0.25> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
    %bare = tw.mlp %x w1 dense<[[1.0], [1.0]]> : tensor<2x1xf32> w2 dense<[[2.0, 3.0]]> : tensor<1x2xf32> : !tw.vec<2> -> !tw.vec<2>
    %no_b1 = tw.mlp %x w1 dense<[[1.0], [1.0]]> : tensor<2x1xf32> w2 dense<[[2.0]]> : tensor<1x1xf32> b2 dense<1.0> : tensor<1xf32> : !tw.vec<2> -> !tw.vec<1>
    tw.output "full" %full : !tw.vec<1>
    tw.output "bare" %bare : !tw.vec<2>
    tw.output "no_b1" %no_b1 : !tw.vec<1>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "mlp"}> ({
// CHECK-NEXT: %x = "tw.input"() <{name = "x", range = #tw.range<-8.0, 8.0>}> : () -> !tw.vec<2>
// CHECK-NEXT{LITERAL}: %full = "tw.mlp"(%x) <{w1 = dense<[[1.000000e+00, -1.000000e+00, 0.000000e+00], [0.000000e+00, 1.000000e+00, 1.000000e+00]]> : tensor<2x3xf32>, b1 = dense<[0.000000e+00, 1.000000e+00, -1.000000e+00]> : tensor<3xf32>, w2 = dense<[[1.000000e+00], [2.000000e+00], [3.000000e+00]]> : tensor<3x1xf32>, b2 = dense<2.500000e-01> : tensor<1xf32>}> : (!tw.vec<2>) -> !tw.vec<1>
// CHECK-NEXT{LITERAL}: %bare = "tw.mlp"(%x) <{w1 = dense<1.000000e+00> : tensor<2x1xf32>, w2 = dense<[[2.000000e+00, 3.000000e+00]]> : tensor<1x2xf32>}> : (!tw.vec<2>) -> !tw.vec<2>
// CHECK-NEXT: %no_b1 = "tw.mlp"(%x) <{w1 = dense<1.000000e+00> : tensor<2x1xf32>, w2 = dense<2.000000e+00> : tensor<1x1xf32>, b2 = dense<1.000000e+00> : tensor<1xf32>}> : (!tw.vec<2>) -> !tw.vec<1>
// CHECK-NEXT: "tw.output"(%full) <{name = "full"}> : (!tw.vec<1>) -> ()
// CHECK-NEXT: "tw.output"(%bare) <{name = "bare"}> : (!tw.vec<2>) -> ()
// CHECK-NEXT: "tw.output"(%no_b1) <{name = "no_b1"}> : (!tw.vec<1>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @compare {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
    %b = tw.compare %x, 0.5 ramp 0.125 : !tw.vec<2>
    tw.output "b" %b : !tw.vec<2>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "compare"}> ({
// CHECK-NEXT: %x = "tw.input"() <{name = "x", range = #tw.range<-8.0, 8.0>}> : () -> !tw.vec<2>
// CHECK-NEXT: %b = "tw.compare"(%x) <{threshold = 5.000000e-01 : f64, ramp = 1.250000e-01 : f64}> : (!tw.vec<2>) -> !tw.vec<2>
// CHECK-NEXT: "tw.output"(%b) <{name = "b"}> : (!tw.vec<2>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @select {
    %c = tw.input "c" <-1.0, 1.0> : !tw.vec<1>
    %cc = tw.input "cc" <-1.0, 1.0> : !tw.vec<2>
    %a = tw.input "a" <-8.0, 8.0> : !tw.vec<2>
    %b = tw.input "b" <-8.0, 8.0> : !tw.vec<2>
    %s = tw.select %c, %a, %b : !tw.vec<1>, !tw.vec<2>
    %t = tw.select %cc, %a, %b : !tw.vec<2>, !tw.vec<2>
    tw.output "s" %s : !tw.vec<2>
    tw.output "t" %t : !tw.vec<2>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "select"}> ({
// CHECK-NEXT: %c = "tw.input"() <{name = "c", range = #tw.range<-1.0, 1.0>}> : () -> !tw.vec<1>
// CHECK-NEXT: %cc = "tw.input"() <{name = "cc", range = #tw.range<-1.0, 1.0>}> : () -> !tw.vec<2>
// CHECK-NEXT: %a = "tw.input"() <{name = "a", range = #tw.range<-8.0, 8.0>}> : () -> !tw.vec<2>
// CHECK-NEXT: %b = "tw.input"() <{name = "b", range = #tw.range<-8.0, 8.0>}> : () -> !tw.vec<2>
// CHECK-NEXT: %s = "tw.select"(%c, %a, %b) : (!tw.vec<1>, !tw.vec<2>, !tw.vec<2>) -> !tw.vec<2>
// CHECK-NEXT: %t = "tw.select"(%cc, %a, %b) : (!tw.vec<2>, !tw.vec<2>, !tw.vec<2>) -> !tw.vec<2>
// CHECK-NEXT: "tw.output"(%s) <{name = "s"}> : (!tw.vec<2>) -> ()
// CHECK-NEXT: "tw.output"(%t) <{name = "t"}> : (!tw.vec<2>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @clamp {
    %x = tw.input "x" <-8.0, 8.0> : !tw.vec<2>
    %y = tw.clamp %x, -1.0, 2.5 : !tw.vec<2>
    tw.output "y" %y : !tw.vec<2>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "clamp"}> ({
// CHECK-NEXT: %x = "tw.input"() <{name = "x", range = #tw.range<-8.0, 8.0>}> : () -> !tw.vec<2>
// CHECK-NEXT: %y = "tw.clamp"(%x) <{lo = -1.000000e+00 : f64, hi = 2.500000e+00 : f64}> : (!tw.vec<2>) -> !tw.vec<2>
// CHECK-NEXT: "tw.output"(%y) <{name = "y"}> : (!tw.vec<2>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @piecewise_linear {
    %x = tw.input "x" <-4.0, 4.0> : !tw.vec<1>
    %sq = tw.piecewise_linear %x breakpoints dense<[-2.0, 0.0, 2.0]> : tensor<3xf32> values dense<[[4.0, -2.0], [0.0, 0.0], [4.0, 2.0]]> : tensor<3x2xf32> : !tw.vec<1> -> !tw.vec<2>
    tw.output "sq" %sq : !tw.vec<2>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "piecewise_linear"}> ({
// CHECK-NEXT: %x = "tw.input"() <{name = "x", range = #tw.range<-4.0, 4.0>}> : () -> !tw.vec<1>
// CHECK-NEXT{LITERAL}: %sq = "tw.piecewise_linear"(%x) <{breakpoints = dense<[-2.000000e+00, 0.000000e+00, 2.000000e+00]> : tensor<3xf32>, values = dense<[[4.000000e+00, -2.000000e+00], [0.000000e+00, 0.000000e+00], [4.000000e+00, 2.000000e+00]]> : tensor<3x2xf32>}> : (!tw.vec<1>) -> !tw.vec<2>
// CHECK-NEXT: "tw.output"(%sq) <{name = "sq"}> : (!tw.vec<2>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}

// -----

builtin.module {
  tw.graph @piecewise_linear_2d {
    %x = tw.input "x" <0.0, 1.0> : !tw.vec<1>
    %y = tw.input "y" <0.0, 1.0> : !tw.vec<1>
    %z = tw.piecewise_linear_2d %x, %y xs dense<[0.0, 1.0]> : tensor<2xf32> ys dense<[0.0, 0.5, 1.0]> : tensor<3xf32> table dense<[[[0.0], [0.5], [1.0]], [[1.0], [1.5], [2.0]]]> : tensor<2x3x1xf32> : !tw.vec<1>, !tw.vec<1> -> !tw.vec<1>
    tw.output "z" %z : !tw.vec<1>
  }
}

// CHECK-LABEL: "tw.graph"() <{sym_name = "piecewise_linear_2d"}> ({
// CHECK-NEXT: %x = "tw.input"() <{name = "x", range = #tw.range<0.0, 1.0>}> : () -> !tw.vec<1>
// CHECK-NEXT: %y = "tw.input"() <{name = "y", range = #tw.range<0.0, 1.0>}> : () -> !tw.vec<1>
// CHECK-NEXT{LITERAL}: %z = "tw.piecewise_linear_2d"(%x, %y) <{xs = dense<[0.000000e+00, 1.000000e+00]> : tensor<2xf32>, ys = dense<[0.000000e+00, 5.000000e-01, 1.000000e+00]> : tensor<3xf32>, table = dense<[[[0.000000e+00], [5.000000e-01], [1.000000e+00]], [[1.000000e+00], [1.500000e+00], [2.000000e+00]]]> : tensor<2x3x1xf32>}> : (!tw.vec<1>, !tw.vec<1>) -> !tw.vec<1>
// CHECK-NEXT: "tw.output"(%z) <{name = "z"}> : (!tw.vec<1>) -> ()
// CHECK-NEXT: {{^  }\) : \(\) -> \(\)$}}
