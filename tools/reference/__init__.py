"""PyTorch reference of the DSpark drafter (LiquidAI LFM2.5 layout) and its helpers."""
