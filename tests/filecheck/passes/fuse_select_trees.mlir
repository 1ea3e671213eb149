// fuse-select-trees: a tree of selects whose conditions are exactly +/-1 (compares of integers
// with no integer in the ramp zone) becomes one MLP chain: per leaf, relu(v - o - K (literals failed)) and a gate carrying the
// offset; a constant leaf is its gate only. A single select, and a tree with a leaf of
// unbounded range, are left to decompose.
// RUN: tw-opt %s --split-input-file -p fuse-select-trees | filecheck %s

// A chain of two: leaves x (c1), 3 (not c1, c2), x (neither). x in [-4, 4]: o = -4, K = 16
// (K/2 = 8 on each condition); the literal 3 is not an input, only its gate's output.
builtin.module {
  tw.graph @chain {
    %x = tw.input "x" <-4.0, 4.0> integer : !tw.vec<1>
    %c1 = tw.compare %x, 1.5 ramp 0.25 : !tw.vec<1>
    %c2 = tw.compare %x, -1.5 ramp 0.25 : !tw.vec<1>
    %a = tw.literal dense<[3.0]> : tensor<1xf32> : !tw.vec<1>
    %inner = tw.select %c2, %a, %x : !tw.vec<1>, !tw.vec<1>
    %r = tw.select %c1, %x, %inner : !tw.vec<1>, !tw.vec<1>
    tw.output "r" %r : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @chain
// CHECK:      %[[IN:.*]] = tw.concat(%c1, %x, %c2) : !tw.vec<1>, !tw.vec<1>, !tw.vec<1> -> !tw.vec<3>
// CHECK-NEXT: %r = tw.mlp %[[IN]] w1 dense<{{\[\[}}8.000000e+00, 5.000000e-01, -5.000000e-01, -8.000000e+00, -5.000000e-01], [1.000000e+00, 0.000000e+00, 0.000000e+00, 1.000000e+00, 0.000000e+00], [0.000000e+00, 0.000000e+00, 5.000000e-01, -8.000000e+00, -5.000000e-01]]> : tensor<3x5xf32>
// CHECK-SAME: b1 dense<[-4.000000e+00, 5.000000e-01, 0.000000e+00, -1.200000e+01, 0.000000e+00]> : tensor<5xf32>
// CHECK-SAME: w2 dense<{{\[\[}}1.000000e+00], [-4.000000e+00], [3.000000e+00], [1.000000e+00], [-4.000000e+00]]> : tensor<5x1xf32>
// CHECK-NEXT: tw.output "r" %r
// CHECK-NOT:  tw.select

// -----

// The inner select repeats the outer condition: its true leaf (x) can never be reached under
// the outer false branch and is dropped: two leaves (y, y), one neuron each (offset 0: no gate).
builtin.module {
  tw.graph @repeated {
    %x = tw.input "x" <0.0, 7.0> integer : !tw.vec<1>
    %y = tw.input "y" <0.0, 7.0> integer : !tw.vec<1>
    %c = tw.compare %x, 3.5 ramp 0.25 : !tw.vec<1>
    %inner = tw.select %c, %x, %y : !tw.vec<1>, !tw.vec<1>
    %r = tw.select %c, %y, %inner : !tw.vec<1>, !tw.vec<1>
    tw.output "r" %r : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @repeated
// CHECK:      %[[IN:.*]] = tw.concat(%c, %y) : !tw.vec<1>, !tw.vec<1> -> !tw.vec<2>
// CHECK-NEXT: %r = tw.mlp %[[IN]] w1 dense<{{\[\[}}4.000000e+00, -4.000000e+00], [1.000000e+00, 1.000000e+00]]> : tensor<2x2xf32>
// CHECK-NOT:  tw.select

// -----

// One select alone: nothing to fuse.
builtin.module {
  tw.graph @single {
    %x = tw.input "x" <0.0, 7.0> : !tw.vec<1>
    %c = tw.compare %x, 3.5 ramp 0.25 : !tw.vec<1>
    %r = tw.select %c, %x, %c : !tw.vec<1>, !tw.vec<1>
    tw.output "r" %r : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @single
// CHECK: %r = tw.select %c, %x, %c

// -----

// A leaf whose range is unbounded (a relu of an unbounded input): left to decompose.
builtin.module {
  tw.graph @unbounded {
    %x = tw.input "x" <0.0, 7.0> integer : !tw.vec<1>
    %c = tw.compare %x, 3.5 ramp 0.25 : !tw.vec<1>
    %d = tw.compare %x, 1.5 ramp 0.25 : !tw.vec<1>
    %big = tw.linear %x weight dense<[[1.0e30]]> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>
    %inner = tw.select %d, %big, %x : !tw.vec<1>, !tw.vec<1>
    %r = tw.select %c, %x, %inner : !tw.vec<1>, !tw.vec<1>
    tw.output "r" %r : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @unbounded
// CHECK: %inner = tw.select %d, %big, %x
// CHECK: %r = tw.select %c, %x, %inner

// -----

// A condition that may sit in its ramp zone (a real x, or an integer on the ramp's edge):
// decompose's ramp would mix the branches there, the fused chain differently, so the tree is
// left alone.
builtin.module {
  tw.graph @ramp_zone {
    %x = tw.input "x" <0.0, 7.0> : !tw.vec<1>
    %n = tw.input "n" <0.0, 7.0> integer : !tw.vec<1>
    %c = tw.compare %x, 3.5 ramp 0.25 : !tw.vec<1>
    %d = tw.compare %n, 1.5 ramp 0.5 : !tw.vec<1>
    %inner = tw.select %d, %n, %x : !tw.vec<1>, !tw.vec<1>
    %r = tw.select %c, %x, %inner : !tw.vec<1>, !tw.vec<1>
    tw.output "r" %r : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @ramp_zone
// CHECK: %inner = tw.select %d, %n, %x
// CHECK: %r = tw.select %c, %x, %inner
