// tw.pos_encoding: position features; max_len prints without a type suffix.
// Custom syntax, checked after a generic print and re-parse (TW_ROUNDTRIP); the
// generic form of every op is checked in generic_form.mlir.
// RUN: TW_ROUNDTRIP

builtin.module {
  tw.graph @main {
    %pos = tw.pos_encoding max_len 16 : !tw.vec<4>
    tw.output "p" %pos : !tw.vec<4>
  }
}

// CHECK-LABEL: tw.graph @main {
// CHECK-NEXT: %pos = tw.pos_encoding max_len 16 : !tw.vec<4>
// CHECK-NEXT: tw.output "p" %pos : !tw.vec<4>
// CHECK-NEXT: {{^  }$}}
// CHECK-NEXT: {{^}$}}
