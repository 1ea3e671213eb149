// --split-input-file: each chunk (separated by a line of five dashes after `//`) is parsed
// and printed on its own, and the outputs are separated the same way.
// RUN: tw-opt %s --split-input-file | filecheck %s

builtin.module {
  tw.graph @first {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>
    tw.output "x" %x : !tw.vec<1>
  }
}

// -----

builtin.module {
  tw.graph @second {
    %p = tw.pos_encoding max_len 8 : !tw.vec<2>
    tw.output "p" %p : !tw.vec<2>
  }
}

// CHECK:      tw.graph @first {
// CHECK:      {{^}}// {{-----$}}
// CHECK-NEXT: builtin.module {
// CHECK-NEXT:   tw.graph @second {
// CHECK-NEXT:     %p = tw.pos_encoding max_len 8 : !tw.vec<2>
