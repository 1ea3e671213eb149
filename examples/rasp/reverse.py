"""Reverse the input (tracr's lib.make_reverse, written out): `tw-rasp examples/rasp/reverse.py 1 2 3`."""
from tracr.rasp import rasp

length = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE))
opp_index = rasp.SequenceMap(lambda n, i: n - i - 1, length, rasp.indices)
flip = rasp.Select(rasp.indices, opp_index, rasp.Comparison.EQ)
program = rasp.Aggregate(flip, rasp.tokens)

vocab = {1, 2, 3}
max_seq_len = 5
compiler_bos = "BOS"
