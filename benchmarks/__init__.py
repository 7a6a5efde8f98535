"""Side-by-side benchmarks of pybroker and a peer broker (Tansu); run `python -m benchmarks.run`."""
