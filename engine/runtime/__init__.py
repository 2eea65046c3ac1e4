"""The serving runtime: engine config, requests, scheduler, engine loop and its log."""
