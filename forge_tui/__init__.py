"""forge-tui: find faster CUDA kernels for PyTorch operators with MCTS, in a terminal UI."""

__version__ = "0.1.0"
