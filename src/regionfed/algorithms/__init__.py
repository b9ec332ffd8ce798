"""Transport-free federated strategies and the registry of comparable methods."""
