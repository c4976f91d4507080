"""The test bed: the emulated cluster, the deployment brought up on it, and the benchmark.

The product's modules never import it (tests/test_layout.py); the tests, the benchmark and the
two commands that show the product on it (`wirespeed demo` and `wirespeed scale-demo`) do.
"""
