"""The Qwen3-Next model: config, layers, loader, default checkpoint."""
