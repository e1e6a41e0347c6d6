"""CPU tests of the PyTorch DSpark reference (tools/reference/) and of its goldens (tests/golden/dspark/).
The reference tests need torch and transformers and are skipped where the interpreter lacks them (the default
.venv has neither); the golden tests recompute the goldens with an independent numpy forward and always run."""
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "dspark"
try:
    import torch
    import transformers  # noqa: F401
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch/transformers not installed in this interpreter")

if torch is not None:
    sys.path.insert(0, str(ROOT))
    from tools.reference.blocks import multi_block_hidden, target_embedding, target_taps
    from tools.reference.dspark import DSparkDrafter, manifest
    from tools.reference.dspark_config import DSparkConfig, evenly_spaced_taps
    from tools.reference.scan import base_logits, draft_block, keyed_gumbel, markov_scan, splitmix64
    from tools.reference.simulate import chain_rounds, expected_calibration_error, sequence_drafts, target_draws
    from tools.reference.tiny import random_drafter, tiny_drafter_config, tiny_target


@pytest.fixture(scope="module")
def pair():
    if torch is None:
        pytest.skip("torch/transformers not installed in this interpreter")
    target = tiny_target(seed=1)
    drafter = random_drafter(tiny_drafter_config(), seed=2)
    torch.manual_seed(3)
    tokens = torch.randint(8, 300, (1, 24))
    taps, logits = target_taps(target, tokens, drafter.config.target_layer_ids)
    return target, drafter, tokens, taps, target_embedding(target)


def test_taps_are_the_outputs_of_the_listed_layers_before_the_final_norm(pair):
    target, drafter, tokens, taps, _ = pair
    out = target(input_ids=tokens, output_hidden_states=True)
    d = target.config.hidden_size
    for i, layer in enumerate(drafter.config.target_layer_ids):
        assert torch.equal(taps[0, :, i * d:(i + 1) * d], out.hidden_states[layer + 1][0])


def test_block_output_has_one_row_per_draft_and_full_vocab_logits(pair):
    _, drafter, tokens, taps, embedding = pair
    draft = draft_block(drafter, taps[0, :10], int(tokens[0, 10]), embedding)
    gamma, vocab = drafter.config.block_size, drafter.config.vocab_size
    assert draft.tokens.shape == (1, gamma) and draft.base_logits.shape == (1, gamma, vocab)
    assert draft.confidences.shape == (1, gamma)
    assert bool(((draft.confidences > 0) & (draft.confidences < 1)).all())


def test_block_sees_context_strictly_before_the_anchor_and_nothing_after(pair):
    _, drafter, tokens, taps, embedding = pair
    p = 12
    base = drafter.block(taps[0, :p], int(tokens[0, p]), embedding)
    changed_last = taps[0, :p].clone()
    changed_last[p - 1] += 1.0
    assert not torch.allclose(drafter.block(changed_last, int(tokens[0, p]), embedding), base)
    # Rows at or after the anchor are not part of the context: the multi-block pass must ignore them.
    anchors = torch.tensor([[p]])
    full = multi_block_hidden(drafter, taps, tokens, anchors, embedding, eager=True)[0, 0]
    spoiled = taps.clone()
    spoiled[0, p:] = 1e3
    assert torch.equal(multi_block_hidden(drafter, spoiled, tokens, anchors, embedding, eager=True)[0, 0], full)


def test_block_attention_is_bidirectional_inside_the_block(pair):
    _, drafter, tokens, taps, embedding = pair
    p = 9
    hidden = drafter.block(taps[0, :p], int(tokens[0, p]), embedding)
    # Changing the mask embedding of later slots must move slot 0 (the anchor sees the masks after it).
    spoiled = embedding.clone()
    spoiled[drafter.config.mask_token_id] += 0.5
    moved = drafter.block(taps[0, :p], int(tokens[0, p]), spoiled)
    assert not torch.allclose(moved[0], hidden[0])


def test_many_blocks_in_one_pass_equal_one_block_at_a_time(pair):
    _, drafter, tokens, taps, embedding = pair
    anchors = torch.tensor([[0, 3, 7, 15, 23]])
    many = multi_block_hidden(drafter, taps, tokens, anchors, embedding, eager=True)
    for i, a in enumerate(anchors[0].tolist()):
        one = drafter.block(taps[0, :a], int(tokens[0, a]), embedding)
        assert torch.allclose(many[0, i], one, atol=1e-5, rtol=1e-5), a


def test_interleaved_rope_equals_neox_after_permuting_q_and_k_rows(pair):
    _, drafter, tokens, taps, embedding = pair
    neox = random_drafter(tiny_drafter_config(rope_is_neox_style=True), seed=2)
    hd = drafter.config.head_dim
    order = torch.cat([torch.arange(0, hd, 2), torch.arange(1, hd, 2)])  # pair order -> half-split order
    state = {k: v.clone() for k, v in drafter.state_dict().items()}
    for name, value in state.items():
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = value.shape[0] // hd
            state[name] = value.view(heads, hd, -1)[:, order].reshape(value.shape)
        elif name.endswith(("q_norm.weight", "k_norm.weight")):
            state[name] = value[order]
    neox.load_state_dict(state)
    p = 14
    a = draft_block(drafter, taps[0, :p], int(tokens[0, p]), embedding)
    b = draft_block(neox, taps[0, :p], int(tokens[0, p]), embedding)
    assert torch.allclose(a.base_logits, b.base_logits, atol=1e-4)
    # Loading the interleaved weights as NeoX without the permutation gives other numbers.
    wrong = random_drafter(tiny_drafter_config(rope_is_neox_style=True), seed=2)
    c = draft_block(wrong, taps[0, :p], int(tokens[0, p]), embedding)
    assert not torch.allclose(a.base_logits, c.base_logits, atol=1e-3)


def test_markov_scan_conditions_each_slot_on_the_previous_pick(pair):
    _, drafter, tokens, taps, embedding = pair
    p = 10
    draft = draft_block(drafter, taps[0, :p], int(tokens[0, p]), embedding)
    prev = int(tokens[0, p])
    for s in range(drafter.config.block_size):
        w1 = drafter.markov_head.markov_w1.weight[prev]
        corrected = draft.base_logits[0, s] + drafter.markov_head.markov_w2.weight @ w1
        assert int(torch.argmax(corrected)) == int(draft.tokens[0, s])
        features = torch.cat([draft.final_hidden[0, s], w1])
        z = features @ drafter.confidence_head.proj.weight[0] + drafter.confidence_head.proj.bias[0]
        assert math.isclose(float(draft.confidence_logits[0, s]), float(z.detach()), rel_tol=1e-5, abs_tol=1e-5)
        prev = int(draft.tokens[0, s])


def test_markov_scan_is_deterministic_and_ties_go_to_the_lower_id(pair):
    _, drafter, tokens, taps, embedding = pair
    p = 10
    a = draft_block(drafter, taps[0, :p], int(tokens[0, p]), embedding)
    b = draft_block(drafter, taps[0, :p], int(tokens[0, p]), embedding)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.confidence_logits, b.confidence_logits)
    flat = torch.zeros(1, drafter.config.block_size, drafter.config.vocab_size)
    zero_markov = random_drafter(tiny_drafter_config(), seed=2)
    with torch.no_grad():
        zero_markov.markov_head.markov_w2.weight.zero_()
    flat[0, :, 17] = flat[0, :, 5] = 1.0
    scan = markov_scan(zero_markov, a.final_hidden, flat, torch.tensor([3]))
    assert scan.tokens.tolist() == [[5] * drafter.config.block_size]


def test_confidence_temperatures_divide_the_logit_per_position(pair):
    _, drafter, tokens, taps, embedding = pair
    p = 10
    temps = [0.5, 1.0, 2.0, 3.0, 4.0]
    a = draft_block(drafter, taps[0, :p], int(tokens[0, p]), embedding)
    b = draft_block(drafter, taps[0, :p], int(tokens[0, p]), embedding, temperatures=temps)
    expected = torch.sigmoid(a.confidence_logits / torch.tensor(temps))
    assert torch.allclose(b.confidences, expected) and not torch.allclose(a.confidences, b.confidences)


@needs_torch
def test_keyed_noise_is_splitmix64_and_changes_with_seed_and_position():
    # splitmix64(0) from the reference implementation (Vigna): 0xe220a8397b1dcdaf.
    assert int(splitmix64(torch.tensor(0))) & ((1 << 64) - 1) == 0xE220A8397B1DCDAF
    g = keyed_gumbel(7, torch.tensor([3, 4]), 50)
    assert torch.equal(g, keyed_gumbel(7, torch.tensor([3, 4]), 50))
    assert not torch.equal(g[0], g[1]) and not torch.equal(g, keyed_gumbel(8, torch.tensor([3, 4]), 50))
    assert bool(torch.isfinite(g).all())


def test_keyed_sampled_picks_follow_the_corrected_distribution(pair):
    _, drafter, tokens, taps, embedding = pair
    hidden = drafter.block(taps[0, :6], int(tokens[0, 6]), embedding)[None, :1]
    logits = base_logits(hidden, embedding) / 4
    counts = torch.zeros(drafter.config.vocab_size)
    draws = 4000
    noise = keyed_gumbel(11, torch.arange(draws), drafter.config.vocab_size)[:, None]
    anchors = torch.full((draws,), int(tokens[0, 6]))
    picks = markov_scan(drafter, hidden.expand(draws, 1, -1), logits.expand(draws, 1, -1), anchors, 1.0, noise).tokens
    counts.index_add_(0, picks[:, 0], torch.ones(draws))
    e = drafter.markov_head.markov_w1.weight[int(tokens[0, 6])]
    probs = torch.softmax(logits[0, 0] + drafter.markov_head.markov_w2.weight @ e, -1)
    top = torch.argsort(probs, descending=True)[:5]
    for t in top.tolist():
        assert abs(counts[t] / draws - probs[t]) < 4 * math.sqrt(probs[t] * (1 - probs[t]) / draws) + 1e-3


@needs_torch
def test_config_round_trips_in_liquidai_layout(tmp_path):
    config = tiny_drafter_config(confidence_temperatures=[1.0, 1.1, 1.2, 1.3, 1.4])
    config.save(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["architectures"] == ["Lfm2DSparkDraftModel"] and raw["model_type"] == "qwen3"
    assert raw["dflash_config"] == {"mask_token_id": 319, "target_layer_ids": [0, 2], "num_target_layers": 4}
    assert raw["rope_is_neox_style"] is False and raw["markov_head_type"] == "vanilla"
    assert "mask_token_id" not in raw and "target_layer_ids" not in raw
    assert DSparkConfig.load(tmp_path) == config


@needs_torch
def test_config_refuses_taps_outside_the_target_and_bad_fields():
    with pytest.raises(ValueError, match="tap layer 3"):
        tiny_drafter_config(target_layer_ids=[0, 3]).validate()
    with pytest.raises(ValueError, match="hidden_act"):
        tiny_drafter_config(hidden_act="gelu").validate()
    with pytest.raises(ValueError, match="rope_theta"):
        tiny_drafter_config(rope_theta=float("nan")).validate()
    with pytest.raises(ValueError, match="mask_token_id"):
        tiny_drafter_config(mask_token_id=320).validate()
    assert evenly_spaced_taps(16, 5) == [1, 4, 8, 11, 14]
    assert all(0 <= t <= 8 for t in evenly_spaced_taps(10, 4))


def test_checkpoint_holds_exactly_the_manifest_in_bf16_and_loads_strictly(tmp_path, pair):
    from safetensors import safe_open

    _, drafter, tokens, taps, embedding = pair
    drafter.save(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
    assert shapes == manifest(drafter.config)
    loaded = DSparkDrafter.load(tmp_path)
    for name, value in drafter.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value.to(torch.bfloat16).float()), name


@pytest.mark.parametrize("temperature", [0.0, 8.0])
def test_offline_round_replay_equals_a_real_speculative_decode(pair, temperature):
    target, drafter, tokens, _, embedding = pair
    gamma, seed, prompt = drafter.config.block_size, 99, tokens[0, :6].tolist()
    taps_of = lambda ids: target_taps(target, torch.tensor([ids]), drafter.config.target_layer_ids)  # noqa: E731
    sequence = prompt + [int(target_draws(taps_of(prompt)[1][0], temperature, seed)[-1])]
    rounds = []
    while len(sequence) < 6 + 30:
        p = len(sequence) - 1                       # the anchor is the newest token, not yet run through the target
        noise = keyed_gumbel(seed, torch.arange(p + 1, p + 1 + gamma), drafter.config.vocab_size) if temperature else None
        draft = draft_block(drafter, taps_of(sequence[:p])[0][0], sequence[p], embedding, temperature, noise)
        window = sequence + draft.tokens[0].tolist()
        draws = target_draws(taps_of(window)[1][0], temperature, seed)[p:]     # the target's draw after each row
        kept = 0
        while kept < gamma and int(draft.tokens[0, kept]) == int(draws[kept]):
            kept += 1
        rounds.append((p, kept))
        sequence += draft.tokens[0, :kept].tolist() + [int(draws[kept])]
    drafts, length = sequence_drafts(target, drafter, sequence, 6, embedding, temperature, seed)
    assert length == len(sequence)
    replay = chain_rounds(drafts, 6)
    expected = [kept for p, kept in rounds if p <= len(sequence) - gamma]
    assert replay == expected and len(replay) >= 4
    assert temperature == 0 or sum(replay) > 0   # near-uniform keyed draws agree often: kept rows are exercised


@needs_torch
def test_expected_calibration_error_is_zero_when_calibrated_and_grows_with_bias():
    predicted = torch.tensor([0.25] * 4 + [0.75] * 4)
    observed = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 0])
    assert expected_calibration_error(predicted, observed) == 0.0
    assert abs(expected_calibration_error(predicted + 0.1, observed) - 0.1) < 1e-6


# ---- An independent numpy forward (fp32) that recomputes the goldens from the checkpoints alone. ----

def read_safetensors(path: Path) -> dict:
    """F32 and BF16 tensors as float32 numpy arrays, parsed by hand (numpy has no bf16)."""
    raw = path.read_bytes()
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + size])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        data = raw[8 + size + begin:8 + size + end]
        if info["dtype"] == "F32":
            array = np.frombuffer(data, dtype="<f4")
        elif info["dtype"] == "BF16":
            array = (np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(info["dtype"])
        out[name] = array.reshape(info["shape"]).astype(np.float32)
    return out


def rms(x, w, eps):
    return w * (x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + eps)).astype(np.float32)


def rope_interleaved(x, positions, theta):
    """x [T, heads, hd]: pair (2i, 2i+1) turns by position * theta^(-2i/hd)."""
    hd = x.shape[-1]
    angle = positions[:, None].astype(np.float64) * theta ** (-np.arange(0, hd, 2) / hd)
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    return out


def numpy_block(w, cfg, taps, anchor, embedding):
    """Returns base logits U [gamma, V], greedy picks and raw confidence logits of one block."""
    d, gamma, eps = cfg["hidden_size"], cfg["block_size"], cfg["rms_norm_eps"]
    hq, hkv, hd, theta = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["rope_theta"]
    p = taps.shape[0]
    context = rms(taps @ w["fc.weight"].T, w["hidden_norm.weight"], eps)
    x = embedding[[anchor] + [cfg["dflash_config"]["mask_token_id"]] * (gamma - 1)]
    block_positions, context_positions = np.arange(p, p + gamma), np.arange(p)
    for i in range(cfg["num_hidden_layers"]):
        L = lambda name: w[f"layers.{i}.{name}"]  # noqa: E731
        def kv(rows, positions):
            k = rms((rows @ L("self_attn.k_proj.weight").T).reshape(len(rows), hkv, hd), L("self_attn.k_norm.weight"), eps)
            return rope_interleaved(k, positions, theta), (rows @ L("self_attn.v_proj.weight").T).reshape(len(rows), hkv, hd)
        u = rms(x, L("input_layernorm.weight"), eps)
        q = rms((u @ L("self_attn.q_proj.weight").T).reshape(gamma, hq, hd), L("self_attn.q_norm.weight"), eps)
        q = rope_interleaved(q, block_positions, theta)
        kc, vc = kv(context, context_positions)
        kb, vb = kv(u, block_positions)
        k, v = np.concatenate([kc, kb]), np.concatenate([vc, vb])
        heads = []
        for h in range(hq):
            scores = q[:, h] @ k[:, h // (hq // hkv)].T / math.sqrt(hd)
            probs = np.exp(scores - scores.max(-1, keepdims=True))
            heads.append((probs / probs.sum(-1, keepdims=True)) @ v[:, h // (hq // hkv)])
        x = x + np.concatenate(heads, -1) @ L("self_attn.o_proj.weight").T
        v2 = rms(x, L("post_attention_layernorm.weight"), eps)
        gate = v2 @ L("mlp.gate_proj.weight").T
        x = x + ((gate / (1 + np.exp(-gate))) * (v2 @ L("mlp.up_proj.weight").T)) @ L("mlp.down_proj.weight").T
    final = rms(x, w["norm.weight"], eps)
    logits = final @ embedding.T
    prev, picks, z = anchor, [], []
    for s in range(gamma):
        e = w["markov_head.markov_w1.weight"][prev]
        picks.append(int(np.argmax(logits[s] + w["markov_head.markov_w2.weight"] @ e)))
        z.append(float(np.concatenate([final[s], e]) @ w["confidence_head.proj.weight"][0] + w["confidence_head.proj.bias"][0]))
        prev = picks[-1]
    return logits, picks, np.array(z, dtype=np.float32)


def read_embedding(target_dir: Path) -> np.ndarray:
    """model.embed_tokens.weight from a single-file or sharded checkpoint."""
    index = target_dir / "model.safetensors.index.json"
    shard = json.loads(index.read_text())["weight_map"]["model.embed_tokens.weight"] if index.exists() else "model.safetensors"
    return read_safetensors(target_dir / shard)["model.embed_tokens.weight"]


@pytest.mark.parametrize("folder, base", [(GOLDEN, GOLDEN), (ROOT / "tests" / "golden" / "dspark_nano", ROOT)],
                         ids=["tiny", "nano"])
def test_goldens_match_an_independent_numpy_forward_in_fp32(folder, base):
    meta = json.loads((folder / "golden.json").read_text())
    cfg = json.loads((base / meta["drafter"] / "config.json").read_text())
    weights = read_safetensors(base / meta["drafter"] / "model.safetensors")
    embedding = read_embedding(base / meta["target"])
    golden = read_safetensors(folder / "golden.safetensors")
    assert len(meta["cases"]) >= 2
    for case in meta["cases"]:
        name = case["name"]
        taps = golden[f"{name}.taps"]
        assert taps.shape[0] == case["anchor_position"]
        logits, picks, z = numpy_block(weights, cfg, taps, case["anchor_token"], embedding)
        np.testing.assert_allclose(golden[f"{name}.fp32.base_logits"], logits, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(golden[f"{name}.fp32.confidence_logits"], z, rtol=1e-4, atol=1e-4)
        assert case["fp32"]["greedy_picks"] == picks
        temps = np.array(cfg["confidence_temperatures"], dtype=np.float32)
        np.testing.assert_allclose(golden[f"{name}.fp32.confidences"], 1 / (1 + np.exp(-z / temps)), rtol=1e-4)
        # bf16 differs from fp32 by rounding only: close, not equal.
        bf16 = golden[f"{name}.bf16.base_logits"]
        assert not np.array_equal(bf16, golden[f"{name}.fp32.base_logits"])
        assert np.abs(bf16 - logits).max() < 0.1 * np.abs(logits).max()
