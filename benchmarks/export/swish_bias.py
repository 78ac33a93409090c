"""A KernelBench-layout task file for the export check: x * sigmoid(x) + bias over the last dim."""

import torch
import torch.nn as nn


class Model(nn.Module):
    """x * sigmoid(x) + bias over the last dim."""

    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.1)

    def forward(self, x):
        return x * torch.sigmoid(x) + self.bias


def get_inputs():
    return [torch.randn(8192, 4096)]


def get_init_inputs():
    return [4096]
