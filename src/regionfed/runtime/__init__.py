"""Runtimes that drive transport-free strategies: the in-process simulator (and Flower)."""
