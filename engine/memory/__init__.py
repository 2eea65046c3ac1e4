"""Memory pools and slot allocation of the engine."""
