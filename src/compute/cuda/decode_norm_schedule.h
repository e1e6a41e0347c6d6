// The decode GEMMs' norm prologue schedule (decode_norm.cuh's stage_normed_x), a bench switch; plain C++ header.
#pragma once

namespace ls::cuda {

// Held (step11): the norm weight's chunks loaded with the first rows' h and delta (one L2 round trip, kept in
// registers through the squares' chain), 8 chunks a thread in flight, the chain's shared loads batched ahead of its
// adds. The same arithmetic in the same order as the plain prologue, so the same bits. LS_NORM_HELD=1 (read once) or
// the setter; off by default until a batch times it. Read when a launch is built (a captured graph keeps its value).
void set_decode_norm_held(bool on);
bool decode_norm_held();
// Tests only: a planted fault in the held prologue (each chunk normed with its neighbour slot's weight).
void set_decode_norm_fault_for_test(bool on);
bool decode_norm_fault_for_test();

}  // namespace ls::cuda
