"""`soak serve`: the built-in engine behind an OpenAI-compatible HTTP API with Prometheus metrics.

    runner = EngineRunner(Engine(config))     # the one thread that drives the engine
    app = build_app(runner, ServerConfig())   # FastAPI: /v1/chat/completions, /metrics, ...

See docs/server.md for the routes, the metric names and how to point a client at it.
"""
