// select-tree-to-pwl2d: a select tree over compares of at most two scalars, with constant or
// piecewise-linear leaves, becomes one piecewise_linear(_2d) on the threshold grid (grid lines
// at t - ramp and t reproduce each compare's ramp). Trees with a shared inner select, a shared
// compare, or a leaf that is not linear on the grid cells are left alone.
// RUN: tw-opt %s --split-input-file -p select-tree-to-pwl2d | filecheck %s

// Depth 2 on one scalar with constant leaves: one piecewise_linear, values ordered by x.
builtin.module {
  tw.graph @one_var {
    %x = tw.input "x" <-4.0, 4.0> : !tw.vec<1>
    %c1 = tw.compare %x, 1.0 ramp 0.5 : !tw.vec<1>
    %c2 = tw.compare %x, -1.0 ramp 0.5 : !tw.vec<1>
    %lo = tw.literal dense<[-1.0]> : tensor<1xf32> : !tw.vec<1>
    %mid = tw.literal dense<[0.0]> : tensor<1xf32> : !tw.vec<1>
    %hi = tw.literal dense<[1.0]> : tensor<1xf32> : !tw.vec<1>
    %inner = tw.select %c2, %mid, %lo : !tw.vec<1>, !tw.vec<1>
    %r = tw.select %c1, %hi, %inner : !tw.vec<1>, !tw.vec<1>
    tw.output "r" %r : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @one_var
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %r = tw.piecewise_linear %x breakpoints dense<[-1.500000e+00, -1.000000e+00, 5.000000e-01, 1.000000e+00]> : tensor<4xf32> values dense<{{\[\[}}-1.000000e+00], [0.000000e+00], [0.000000e+00], [1.000000e+00]]> : tensor<4x1xf32> : !tw.vec<1> -> !tw.vec<1>
// CHECK-NEXT: tw.output "r" %r
// CHECK-NOT:  tw.select
// CHECK-NOT:  tw.compare
// CHECK-NOT:  tw.literal

// -----

// Two scalars: compare x then y, a leaf linear in y: one piecewise_linear_2d spanning y's range.
builtin.module {
  tw.graph @two_vars {
    %x = tw.input "x" <-4.0, 4.0> : !tw.vec<1>
    %y = tw.input "y" <-2.0, 2.0> : !tw.vec<1>
    %cx = tw.compare %x, 0.0 ramp 0.5 : !tw.vec<1>
    %cy = tw.compare %y, 1.0 ramp 0.5 : !tw.vec<1>
    %ly = tw.linear %y weight dense<[[2.0]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    %k = tw.literal dense<[5.0]> : tensor<1xf32> : !tw.vec<1>
    %z = tw.literal dense<[0.0]> : tensor<1xf32> : !tw.vec<1>
    %inner = tw.select %cy, %k, %ly : !tw.vec<1>, !tw.vec<1>
    %r = tw.select %cx, %inner, %z : !tw.vec<1>, !tw.vec<1>
    tw.output "r" %r : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @two_vars
// CHECK-NEXT: %x = tw.input "x"
// CHECK-NEXT: %y = tw.input "y"
// CHECK-NEXT: %r = tw.piecewise_linear_2d %x, %y xs dense<[-5.000000e-01, 0.000000e+00]> : tensor<2xf32> ys dense<[-2.000000e+00, 5.000000e-01, 1.000000e+00, 2.000000e+00]> : tensor<4xf32> table
// CHECK-SAME: tensor<2x4x1xf32> : !tw.vec<1>, !tw.vec<1> -> !tw.vec<1>
// CHECK-NEXT: tw.output "r" %r
// CHECK-NOT:  tw.select

// -----

// The inner select has another use: the outer tree is not rewritten (the inner one, a tree of
// its own, is).
builtin.module {
  tw.graph @shared_inner {
    %x = tw.input "x" <-4.0, 4.0> : !tw.vec<1>
    %y = tw.input "y" <-4.0, 4.0> : !tw.vec<1>
    %cx = tw.compare %x, 0.0 ramp 0.5 : !tw.vec<1>
    %cy = tw.compare %y, 0.0 ramp 0.5 : !tw.vec<1>
    %a = tw.literal dense<[1.0]> : tensor<1xf32> : !tw.vec<1>
    %b = tw.literal dense<[2.0]> : tensor<1xf32> : !tw.vec<1>
    %inner = tw.select %cy, %a, %b : !tw.vec<1>, !tw.vec<1>
    %r = tw.select %cx, %inner, %a : !tw.vec<1>, !tw.vec<1>
    tw.output "inner" %inner : !tw.vec<1>
    tw.output "r" %r : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @shared_inner
// CHECK:      %cx = tw.compare %x
// CHECK:      %inner = tw.piecewise_linear %y
// CHECK-NEXT: %r = tw.select %cx, %inner, %a
// CHECK-NOT:  tw.piecewise_linear_2d

// -----

// The compare has another use: nothing is rewritten.
builtin.module {
  tw.graph @shared_compare {
    %x = tw.input "x" <-4.0, 4.0> : !tw.vec<1>
    %cx = tw.compare %x, 0.0 ramp 0.5 : !tw.vec<1>
    %a = tw.literal dense<[1.0]> : tensor<1xf32> : !tw.vec<1>
    %b = tw.literal dense<[2.0]> : tensor<1xf32> : !tw.vec<1>
    %r = tw.select %cx, %a, %b : !tw.vec<1>, !tw.vec<1>
    tw.output "c" %cx : !tw.vec<1>
    tw.output "r" %r : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @shared_compare
// CHECK:      %r = tw.select %cx, %a, %b
// CHECK-NOT:  tw.piecewise_linear

// -----

// A product leaf (a 2-D table is not linear on an arbitrary refined grid): rejected.
builtin.module {
  tw.graph @product_leaf {
    %x = tw.input "x" <-4.0, 4.0> : !tw.vec<1>
    %y = tw.input "y" <-4.0, 4.0> : !tw.vec<1>
    %cx = tw.compare %x, 0.0 ramp 0.5 : !tw.vec<1>
    %xy = tw.piecewise_linear_2d %x, %y xs dense<[-4.0, 4.0]> : tensor<2xf32> ys dense<[-4.0, 4.0]> : tensor<2xf32> table dense<[[[16.0], [-16.0]], [[-16.0], [16.0]]]> : tensor<2x2x1xf32> : !tw.vec<1>, !tw.vec<1> -> !tw.vec<1>
    %a = tw.literal dense<[1.0]> : tensor<1xf32> : !tw.vec<1>
    %r = tw.select %cx, %xy, %a : !tw.vec<1>, !tw.vec<1>
    tw.output "r" %r : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @product_leaf
// CHECK:      %r = tw.select %cx, %xy, %a
