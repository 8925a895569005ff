"""The PyTorch twin of ``jaxfeed.models.CNN`` (benchmarks only): same layers and sizes, BatchNorm
momentum matched (PyTorch 0.1 is Flax 0.9), channels-last (NHWC) input like the JAX model."""

from __future__ import annotations

import torch
from torch import nn


class TorchCNN(nn.Module):
    def __init__(
        self,
        num_classes: int = 10,
        input_shape: tuple[int, int, int] = (32, 32, 3),
        dropout_rate: float = 0.5,
    ) -> None:
        super().__init__()
        h, w, c = input_shape
        self.conv1 = nn.Conv2d(c, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32, momentum=0.1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64, momentum=0.1)
        self.linear1 = nn.Linear((h // 4) * (w // 4) * 64, 128)
        self.dropout = nn.Dropout(dropout_rate)
        self.linear2 = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 3, 1, 2)  # NHWC batches, as jaxfeed yields them
        x = nn.functional.max_pool2d(self.bn1(torch.relu(self.conv1(x))), 2)
        x = nn.functional.max_pool2d(self.bn2(torch.relu(self.conv2(x))), 2)
        x = torch.flatten(x, 1)
        x = self.dropout(torch.relu(self.linear1(x)))
        return self.linear2(x)
