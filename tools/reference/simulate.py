"""Offline speculative rounds on a sequence the target produced itself (greedy, or keyed-sampled with a seed).

Glossary. Row j's draw is the token the target picks after positions 0..j (the token at j+1). On a sequence the
target generated, that draw is the next token of the sequence, so a block at anchor a keeps its slot-s draft iff
every draft up to s equals tokens[a+1..a+s+1]: the accepted length of that round is known without running the target
again. A decode then goes round by round: anchor a -> n drafts kept -> bonus -> next anchor a+n+1.
"""
from __future__ import annotations

import dataclasses

import torch

from .blocks import multi_block_hidden
from .dspark import DSparkDrafter
from .scan import base_logits, keyed_gumbel, markov_scan


def target_draws(logits: torch.Tensor, temperature: float, seed: int) -> torch.Tensor:
    """Row draws [S] from fp32 logits [S, V]: argmax, or keyed argmax(logits/T + g(seed, j+1)) for row j."""
    if temperature <= 0:
        return torch.argmax(logits, dim=-1)
    positions = torch.arange(1, logits.shape[0] + 1, device=logits.device)
    return torch.argmax(logits.double() / temperature + keyed_gumbel(seed, positions, logits.shape[-1]), dim=-1)


def consistent_length(tokens: torch.Tensor, draws: torch.Tensor, prompt_length: int) -> int:
    """Longest prefix whose response tokens all equal the target's draws (generation's cached path can flip
    near-ties against one full forward; rounds stop there)."""
    response = torch.arange(prompt_length, tokens.shape[0], device=tokens.device)
    bad = (tokens[response] != draws[response - 1]).nonzero()
    return tokens.shape[0] if bad.numel() == 0 else int(response[bad[0, 0]])


@dataclasses.dataclass
class AnchorDrafts:
    anchors: torch.Tensor            # [A] anchor positions (every response position whose block lies in the sequence)
    picks: torch.Tensor              # [A, gamma]
    confidence_logits: torch.Tensor  # [A, gamma] raw z
    accepted: torch.Tensor           # [A] drafts kept in a round anchored there (0..gamma)


@torch.no_grad()
def drafts_at_every_anchor(drafter: DSparkDrafter, taps, tokens, draws, prompt_length: int, length: int, embedding,
                           temperature: float = 0.0, seed: int = 0, chunk: int = 256) -> AnchorDrafts:
    """taps [S, m*d_t], tokens/draws [S]; anchors p in [prompt_length, length - gamma] so every slot's draw is known."""
    gamma = drafter.config.block_size
    # A response shorter than gamma has no anchor (arange refuses an end before its start).
    anchors = torch.arange(prompt_length, max(prompt_length, length - gamma + 1), device=tokens.device)
    picks, z = [], []
    for begin in range(0, anchors.numel(), chunk):
        part = anchors[begin:begin + chunk]
        hidden = multi_block_hidden(drafter, taps[None], tokens[None], part[None], embedding)[0]   # [A, gamma, d]
        logits = base_logits(hidden, embedding)
        noise = None
        if temperature > 0:
            noise = keyed_gumbel(seed, part[:, None] + torch.arange(1, gamma + 1, device=part.device), logits.shape[-1])
        scan = markov_scan(drafter, hidden, logits, tokens[part], temperature, noise, temperatures=[1.0] * gamma)
        picks.append(scan.tokens)
        z.append(scan.confidence_logits)
    picks = torch.cat(picks) if picks else torch.zeros(0, gamma, dtype=torch.long, device=tokens.device)
    z = torch.cat(z) if z else torch.zeros(0, gamma, device=tokens.device)
    truth = draws[anchors[:, None] + torch.arange(gamma, device=tokens.device)]                     # [A, gamma]
    accepted = torch.cumprod((picks == truth).long(), dim=1).sum(dim=1)
    return AnchorDrafts(anchors, picks, z, accepted)


def chain_rounds(drafts: AnchorDrafts, prompt_length: int) -> list[int]:
    """Drafts kept per round of one decode starting at the first response position (complete rounds only)."""
    by_anchor = {int(a): int(n) for a, n in zip(drafts.anchors.tolist(), drafts.accepted.tolist())}
    rounds, anchor = [], prompt_length
    while anchor in by_anchor:
        kept = by_anchor[anchor]
        rounds.append(kept)
        anchor += kept + 1
    return rounds


def survival_targets(drafts: AnchorDrafts) -> torch.Tensor:
    """[A, gamma] 1.0 where the round anchored there keeps slot k and every slot before it."""
    gamma = drafts.picks.shape[1]
    return (torch.arange(gamma, device=drafts.accepted.device)[None] < drafts.accepted[:, None]).float()


def cumulative_confidence(z: torch.Tensor, temperatures) -> torch.Tensor:
    """Predicted survival a_k = prod_{i<=k} sigmoid(z_i / T_i): [A, gamma]."""
    temps = torch.as_tensor(temperatures, dtype=z.dtype, device=z.device)
    return torch.cumprod(torch.sigmoid(z / temps), dim=1)


def expected_calibration_error(predicted: torch.Tensor, observed: torch.Tensor, bins: int = 10) -> float:
    """sum_b |B|/N * |mean(pred) - mean(obs)| over equal-width bins of the predicted probability."""
    predicted, observed = predicted.flatten().double(), observed.flatten().double()
    if predicted.numel() == 0:
        return float("nan")
    index = torch.clamp((predicted * bins).long(), max=bins - 1)
    error = 0.0
    for b in range(bins):
        members = index == b
        if members.any():
            error += float(members.sum()) * abs(float(predicted[members].mean() - observed[members].mean()))
    return error / predicted.numel()


@torch.no_grad()
def sequence_drafts(target, drafter: DSparkDrafter, ids: list[int], prompt_length: int, embedding,
                    temperature: float = 0.0, seed: int = 0) -> tuple[AnchorDrafts, int]:
    """One target forward over a generated sequence, then the drafts at every anchor; also the consistent length."""
    from .blocks import target_taps

    device = embedding.device
    tokens = torch.tensor(ids, device=device)
    taps, logits = target_taps(target, tokens[None], drafter.config.target_layer_ids)
    draws = target_draws(logits[0], temperature, seed)
    length = consistent_length(tokens, draws, prompt_length)
    drafts = drafts_at_every_anchor(drafter, taps[0].float(), tokens, draws, prompt_length, length, embedding,
                                    temperature, seed)
    return drafts, length
