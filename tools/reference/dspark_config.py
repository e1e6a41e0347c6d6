"""The DSpark drafter's config.json in LiquidAI's LFM2.5 format (reference/dspark.md §3.1), read and written."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

# Fields written beyond LiquidAI's published set:
#   confidence_temperatures: [block_size] floats, the STS per-position temperatures T_k (c_k = sigmoid(z_k / T_k));
#                            absent means no calibration (T_k = 1).
#   target_hidden_size:      written only when the target's hidden size differs from the draft's (fc in = m * this).


@dataclasses.dataclass
class DSparkConfig:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    block_size: int                       # gamma = number of drafts (anchor-first convention)
    mask_token_id: int
    target_layer_ids: list[int]           # target layers whose outputs are tapped, in concat order
    num_target_layers: int
    markov_rank: int
    rope_theta: float = 1e6
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 128000
    hidden_act: str = "silu"
    markov_head_type: str = "vanilla"
    rope_is_neox_style: bool = False
    enable_confidence_head: bool = True
    confidence_temperatures: list[float] | None = None
    target_hidden_size: int | None = None

    @property
    def tap_hidden_size(self) -> int:
        return self.target_hidden_size or self.hidden_size

    @property
    def fc_in_features(self) -> int:
        return len(self.target_layer_ids) * self.tap_hidden_size

    def validate(self) -> None:
        """Raises ValueError naming the field, for the same refusals the C++ admission makes."""
        if self.hidden_act != "silu":
            raise ValueError(f"hidden_act {self.hidden_act!r} unsupported (only silu)")
        if self.markov_head_type != "vanilla":
            raise ValueError(f"markov_head_type {self.markov_head_type!r} unsupported (only vanilla)")
        if not (math.isfinite(self.rope_theta) and self.rope_theta > 0):
            raise ValueError(f"rope_theta {self.rope_theta} must be finite and positive")
        if self.block_size < 1:
            raise ValueError(f"block_size {self.block_size} must be at least 1")
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise ValueError(f"mask_token_id {self.mask_token_id} outside vocab {self.vocab_size}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"{self.num_attention_heads} query heads not a multiple of {self.num_key_value_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")
        for layer in self.target_layer_ids:
            if not 0 <= layer <= self.num_target_layers - 2:
                raise ValueError(f"tap layer {layer} outside [0, {self.num_target_layers - 2}]")
        temps = self.confidence_temperatures
        if temps is not None and (len(temps) != self.block_size or not all(t > 0 for t in temps)):
            raise ValueError(f"confidence_temperatures {temps} must be {self.block_size} positive values")

    def to_json_dict(self) -> dict:
        d = {
            "architectures": ["Lfm2DSparkDraftModel"],
            "model_type": "qwen3",
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "hidden_act": self.hidden_act,
            "rms_norm_eps": self.rms_norm_eps,
            "vocab_size": self.vocab_size,
            "rope_theta": float(self.rope_theta),
            "max_position_embeddings": self.max_position_embeddings,
            "layer_types": ["full_attention"] * self.num_hidden_layers,
            "attention_bias": False,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "block_size": self.block_size,
            "dflash_config": {
                "mask_token_id": self.mask_token_id,
                "target_layer_ids": list(self.target_layer_ids),
                "num_target_layers": self.num_target_layers,
            },
            "markov_rank": self.markov_rank,
            "markov_head_type": self.markov_head_type,
            "rope_is_neox_style": self.rope_is_neox_style,
            "enable_confidence_head": self.enable_confidence_head,
        }
        if self.confidence_temperatures is not None:
            d["confidence_temperatures"] = [float(t) for t in self.confidence_temperatures]
        if self.target_hidden_size is not None and self.target_hidden_size != self.hidden_size:
            d["target_hidden_size"] = self.target_hidden_size
        return d

    @classmethod
    def from_json_dict(cls, d: dict) -> "DSparkConfig":
        """Reads LiquidAI's layout; dspark_config / top-level / dspark_* keys are accepted as the C++ loader does."""
        def draft_field(name):
            for table in (d.get("dflash_config") or {}, d.get("dspark_config") or {}):
                if name in table:
                    return table[name]
            if name in d:
                return d[name]
            if f"dspark_{name}" in d:
                return d[f"dspark_{name}"]
            raise ValueError(f"draft config lacks {name}")

        heads = d["num_attention_heads"]
        return cls(
            hidden_size=d["hidden_size"],
            num_hidden_layers=d["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=d.get("num_key_value_heads", heads),
            head_dim=d.get("head_dim", d["hidden_size"] // heads),
            intermediate_size=d["intermediate_size"],
            vocab_size=d["vocab_size"],
            block_size=d["block_size"],
            mask_token_id=draft_field("mask_token_id"),
            target_layer_ids=list(draft_field("target_layer_ids")),
            num_target_layers=draft_field("num_target_layers"),
            markov_rank=d["markov_rank"],
            rope_theta=d.get("rope_theta", 1e6),
            rms_norm_eps=d.get("rms_norm_eps", 1e-5),
            max_position_embeddings=d.get("max_position_embeddings", 128000),
            hidden_act=d.get("hidden_act", "silu"),
            markov_head_type=d.get("markov_head_type", "vanilla"),
            rope_is_neox_style=d.get("rope_is_neox_style", False),
            enable_confidence_head=d.get("enable_confidence_head", True),
            confidence_temperatures=d.get("confidence_temperatures"),
            target_hidden_size=d.get("target_hidden_size"),
        )

    def save(self, directory: str | Path) -> None:
        path = Path(directory) / "config.json"
        path.write_text(json.dumps(self.to_json_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, directory: str | Path) -> "DSparkConfig":
        config = cls.from_json_dict(json.loads((Path(directory) / "config.json").read_text()))
        config.validate()
        return config


def evenly_spaced_taps(num_target_layers: int, count: int) -> list[int]:
    """Tap ids spread over [1, N-2] (LFM2.5-1.2B uses [2,5,8,11,14] of 16); distinct and increasing."""
    last = num_target_layers - 2
    first = min(1, last)
    if count == 1:
        return [last]
    ids = sorted({round(first + (last - first) * i / (count - 1)) for i in range(count)})
    return ids
