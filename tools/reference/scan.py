"""The DSpark Markov scan over a block (greedy or keyed-sampled picks) and the confidence head (reference/dspark.md
§2.8-2.9), batched over requests, plus the counter-based keyed Gumbel noise the sampled picks use."""
from __future__ import annotations

import dataclasses

import torch

from .dspark import DSparkDrafter

_MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 lanes holding uint64 bit patterns."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def splitmix64(x: torch.Tensor) -> torch.Tensor:
    """splitmix64 on int64 tensors (uint64 bit patterns, wrapping arithmetic), as src/base/hash.h."""
    x = x + _signed(0x9E3779B97F4A7C15)
    x = (x ^ _shift_right(x, 30)) * _signed(0xBF58476D1CE4E5B9)
    x = (x ^ _shift_right(x, 27)) * _signed(0x94D049BB133111EB)
    return x ^ _shift_right(x, 31)


def keyed_gumbel(seed, positions: torch.Tensor, vocab: int) -> torch.Tensor:
    """-log(-log u(seed, position, i)) fp64 [..., vocab] for positions [...] (seed: int, or int64 tensor broadcasting
    with positions), as src/compute/sampling.cpp: u = uniform_open01(splitmix64(splitmix64(splitmix64(seed) ^ position)
    ^ i)). The position is the absolute position of the token being drawn (slot s of a block at p draws p+s+1)."""
    device = positions.device
    if not torch.is_tensor(seed):
        seed = torch.tensor(_signed(seed & _MASK64), dtype=torch.int64)
    key = splitmix64(seed.to(device=device, dtype=torch.int64))
    per_position = splitmix64(key ^ positions.to(torch.int64))[..., None]
    bits = splitmix64(per_position ^ torch.arange(vocab, dtype=torch.int64, device=device))
    u = (_shift_right(bits, 11).to(torch.float64) + 0.5) * (1.0 / 9007199254740992.0)
    return -torch.log(-torch.log(u))


@dataclasses.dataclass
class BlockDraft:
    tokens: torch.Tensor             # [B, gamma] int64 picks x_1..x_gamma (positions p+1..p+gamma)
    base_logits: torch.Tensor        # [B, gamma, V] fp32 U
    confidence_logits: torch.Tensor  # [B, gamma] fp32 z_k (before any temperature)
    confidences: torch.Tensor        # [B, gamma] fp32 c_k = sigmoid(z_k / T_k) (T_k = 1 without calibration)
    final_hidden: torch.Tensor       # [B, gamma, d] model dtype Hf


def base_logits(final_hidden: torch.Tensor, embedding: torch.Tensor) -> torch.Tensor:
    """U = Hf . E^T in fp32 on the upcast values: [..., d] x [V, d] -> [..., V]."""
    return final_hidden.float() @ embedding.float().t()


def markov_scan(drafter: DSparkDrafter, final_hidden, logits, anchors, temperature: float = 0.0, noise=None,
                temperatures=None) -> BlockDraft:
    """Serial scan: prev = anchor; for each slot, l = U_s + W2 W1[prev]; pick = argmax(l) (ties to the lower id) or,
    when temperature > 0, argmax(double(l) / T + noise_s) in fp64 as the keyed sampler does; confidence from
    [Hf_s ; W1[prev]].

    final_hidden [B, gamma, d]; logits U [B, gamma, V] fp32; anchors [B]; noise [B, gamma, V] fp64 keyed Gumbel;
    temperatures: per-position STS temperatures (defaults to the config's, None = 1).
    """
    gamma = logits.shape[1]
    if temperatures is None:
        temperatures = drafter.config.confidence_temperatures
    prev = anchors.to(torch.long)
    picks, z = [], []
    for s in range(gamma):
        e = drafter.markov_head.embed(prev)                          # [B, r] fp32
        corrected = logits[:, s] + drafter.markov_head.bias(e)       # [B, V] fp32
        if temperature > 0:
            corrected = corrected.double() / temperature + noise[:, s]
        # torch.argmax returns the first maximal index, i.e. ties go to the lower id.
        pick = torch.argmax(corrected, dim=-1)
        z.append(drafter.confidence_head.logit(final_hidden[:, s], e))
        picks.append(pick)
        prev = pick
    z = torch.stack(z, dim=1)
    scale = torch.ones(gamma) if temperatures is None else torch.tensor(temperatures[:gamma], dtype=torch.float32)
    confidences = torch.sigmoid(z / scale.to(z.device))
    return BlockDraft(torch.stack(picks, dim=1), logits, z, confidences, final_hidden)


@torch.no_grad()
def draft_block(drafter: DSparkDrafter, taps: torch.Tensor, anchor: int, embedding: torch.Tensor,
                temperature: float = 0.0, noise=None, temperatures=None) -> BlockDraft:
    """One request end to end: taps [p, m*d_t] of positions 0..p-1, anchor at p -> the block's drafts (batch 1)."""
    final_hidden = drafter.block(taps, anchor, embedding)[None]
    logits = base_logits(final_hidden, embedding)
    anchors = torch.tensor([anchor], device=embedding.device)
    return markov_scan(drafter, final_hidden, logits, anchors, temperature,
                       None if noise is None else noise[None], temperatures)
