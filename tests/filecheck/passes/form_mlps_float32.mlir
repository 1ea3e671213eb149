// form-mlps and fuse-linears keep a gain outside a thermometer whose float32 sums it would
// round: lanes act(1024 s + b) of an integer sum s up to 2e6 and power-of-two w2 cancel
// exactly; times 625/8 inside the mlp they would not (torchwright's scalar-space adder at 4
// and 5 digits compiled wrong that way). At one digit the same gain folds: float32 keeps it.
// RUN: tw-opt %s --split-input-file -p form-mlps | filecheck %s
// RUN: tw-opt %s --split-input-file -p fuse-linears | filecheck %s
// RUN: tw-opt %s --split-input-file -p optimize | filecheck %s --check-prefix=OPT

builtin.module {
  tw.graph @wide {
    %0 = tw.input "a" <0.0, 999999.0> integer : !tw.vec<1>
    %1 = tw.input "b" <0.0, 999999.0> integer : !tw.vec<1>
    %2 = tw.add %0, %1 : !tw.vec<1>
    %3 = tw.mlp %2 act swish w1 dense<1.024000e+03> : tensor<1x2xf32> b1 dense<[-796443136.0, -796443264.0]> : tensor<2xf32> w2 dense<[[1.562500e-02], [-1.562500e-02]]> : tensor<2x1xf32> b2 dense<-1.000000e+00> : tensor<1xf32> : !tw.vec<1> -> !tw.vec<1>
    %4 = tw.linear %3 weight dense<7.812500e+01> : tensor<1x1xf32> bias dense<7.812500e+01> : tensor<1xf32> : !tw.vec<1> -> !tw.vec<1>
    %5 = tw.add %2, %4 : !tw.vec<1>
    tw.output "y" %5 : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @wide
// CHECK: tw.mlp {{.*}} w2 dense<{{\[\[}}1.562500e-02], [-1.562500e-02]]>
// CHECK: tw.linear {{.*}} weight dense<7.812500e+01>
// OPT-LABEL: tw.graph @wide
// OPT: tw.mlp {{.*}} w2 dense<{{\[\[}}1.562500e-02], [-1.562500e-02]]>
// OPT: tw.linear {{.*}} weight dense<7.812500e+01>

// -----

builtin.module {
  tw.graph @narrow {
    %0 = tw.input "a" <0.0, 9.0> integer : !tw.vec<1>
    %1 = tw.mlp %0 w1 dense<1.024000e+03> : tensor<1x2xf32> b1 dense<[-8704.0, -8832.0]> : tensor<2xf32> w2 dense<[[1.562500e-02], [-1.562500e-02]]> : tensor<2x1xf32> b2 dense<-1.000000e+00> : tensor<1xf32> : !tw.vec<1> -> !tw.vec<1>
    %2 = tw.linear %1 weight dense<7.812500e+01> : tensor<1x1xf32> bias dense<7.812500e+01> : tensor<1xf32> : !tw.vec<1> -> !tw.vec<1>
    tw.output "y" %2 : !tw.vec<1>
  }
}
// CHECK-LABEL: tw.graph @narrow
// CHECK: tw.mlp {{.*}} w2 dense<{{\[\[}}1.22070312], [-1.22070312]]>
// CHECK-NOT: tw.linear
// OPT-LABEL: tw.graph @narrow
// OPT: tw.mlp {{.*}} w2 dense<{{\[\[}}1.22070312], [-1.22070312]]>
// OPT-NOT: tw.linear
