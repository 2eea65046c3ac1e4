"""Where MoE expert weights live: `resident` (in place) or `offload` (host tier + device slots).

This module is torch-free and names the choices, so that the engine's config (and the server's
command line built from it) loads without torch; the builder is `engine.moe.provider`."""

MOE_BACKENDS = ("resident", "offload")
