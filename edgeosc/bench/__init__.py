"""Benchmarks of exported models on runtimes."""
