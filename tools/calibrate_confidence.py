"""Sequential temperature scaling (STS, reference/dspark.md §4.5) of the drafter's confidence head, stored in its
config.json as `confidence_temperatures`.

  python tools/calibrate_confidence.py --target models/nano/target --drafter models/nano/drafter --regen WORK/regen.pt

Data: the held-out calibration slice of the regenerated responses (greedy ones: the engine's default), drafted at
every anchor. For k = 1..gamma in order, T_k is the grid value minimising the ECE of the predicted survival
prod_{i<=k} sigmoid(z_i / T_i) against the observed survival (slots 1..k all kept), with T_{<k} fixed.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.reference.blocks import target_embedding  # noqa: E402
from tools.reference.dspark import DSparkDrafter  # noqa: E402
from tools.reference.simulate import (cumulative_confidence, expected_calibration_error, sequence_drafts,  # noqa: E402
                                      survival_targets)

GRID = torch.exp(torch.linspace(torch.log(torch.tensor(0.2)), torch.log(torch.tensor(8.0)), 121))


def collect(target, drafter, sequences, embedding, temperature: float = 0.0):
    """Raw confidence logits z [N, gamma] and observed survival [N, gamma] over every anchor of the sequences."""
    zs, survival = [], []
    for s in sequences:
        drafts, _ = sequence_drafts(target, drafter, s["ids"], s["prompt_length"], embedding, temperature, s["seed"])
        zs.append(drafts.confidence_logits.cpu())
        survival.append(survival_targets(drafts).cpu())
    return torch.cat(zs), torch.cat(survival)


def fit_temperatures(z: torch.Tensor, survival: torch.Tensor) -> list[float]:
    temps: list[float] = []
    for k in range(z.shape[1]):
        # Ties (e.g. a position never kept) go to the temperature closest to 1.
        best = min(GRID.tolist(), key=lambda t: (round(expected_calibration_error(
            cumulative_confidence(z[:, :k + 1], temps + [t])[:, k], survival[:, k]), 6), abs(math.log(t))))
        temps.append(round(best, 4))
    return temps


def calibration_report(z, survival, temps) -> dict:
    predicted = cumulative_confidence(z, temps)
    return {"ece": round(expected_calibration_error(predicted, survival), 4),
            "ece_by_position": [round(expected_calibration_error(predicted[:, k], survival[:, k]), 4)
                                for k in range(z.shape[1])],
            "mean_predicted": [round(float(v), 4) for v in predicted.mean(0)],
            "mean_observed": [round(float(v), 4) for v in survival.mean(0)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="models/nano/target")
    parser.add_argument("--drafter", default="models/nano/drafter")
    parser.add_argument("--regen", required=True, help="regen.pt written by tools/train_drafter.py")
    parser.add_argument("--report", default=None, help="write the before/after numbers here (JSON)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32).to(args.device).eval()
    drafter = DSparkDrafter.load(args.drafter, device=args.device).eval()
    embedding = target_embedding(target).float()
    sequences = [s for s in torch.load(args.regen)["calibration"] if s["temperature"] == 0.0]
    z, survival = collect(target, drafter, sequences, embedding)
    gamma = drafter.config.block_size
    temps = fit_temperatures(z, survival)
    report = {"anchors": z.shape[0], "sequences": len(sequences), "temperatures": temps,
              "before": calibration_report(z, survival, [1.0] * gamma), "after": calibration_report(z, survival, temps)}
    drafter.config.confidence_temperatures = temps
    drafter.config.save(args.drafter)
    print(json.dumps(report))
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
