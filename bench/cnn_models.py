"""Convolution nets for the models benchmark, defined here (torchvision is not a
dependency of this project).

- :func:`resnet18`: the ResNet-18 of He et al. (2015), "Deep Residual Learning for
  Image Recognition", as commonly built for ImageNet: a 7x7/2 stem convolution,
  batch norm, ReLU and 3x3/2 max pooling, four stages of two basic blocks (two 3x3
  convolutions each, batch norm after each, identity shortcut or a strided 1x1
  projection with batch norm when the shape changes), global average pooling and a
  linear classifier. 11.7 M parameters with 1000 classes.
- :func:`mobilenet_v2`: the MobileNetV2 of Sandler et al. (2018), "MobileNetV2:
  Inverted Residuals and Linear Bottlenecks": a 3x3/2 stem, seventeen inverted
  residual blocks (1x1 expansion, 3x3 depthwise convolution, linear 1x1
  projection, ReLU6 after the first two, a residual connection where stride is 1
  and the channel count is unchanged), a 1x1 convolution to 1280 channels, global
  average pooling and a classifier. 3.5 M parameters at width 1.0, 1000 classes.
- :class:`ONet`: the output network of MTCNN (Zhang et al. 2016), the layout of
  the ``onet.pt`` weights that the ``facenet-pytorch`` package ships (its module
  names, so its state dict loads as is): three 3x3 convolutions with PReLU and
  ceil-mode max pooling, a 2x2 convolution, a dense layer and three heads (face
  probability, box regression, five landmarks).
"""
from __future__ import annotations

from typing import List, Optional

import torch
import torch.nn as nn


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm; the shortcut projects when shapes change."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample: Optional[nn.Module] = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, layers: List[int], num_classes: int = 1000, width: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages = []
        cin = width
        for i, n in enumerate(layers):
            cout = width * 2 ** i
            blocks = [BasicBlock(cin, cout, 1 if i == 0 else 2)]
            blocks += [BasicBlock(cout, cout) for _ in range(n - 1)]
            stages.append(nn.Sequential(*blocks))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(num_classes: int = 1000) -> ResNet:
    """ResNet-18 (random weights)."""
    return ResNet([2, 2, 2, 2], num_classes)


def _conv_bn_relu6(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    """1x1 expansion, 3x3 depthwise, linear 1x1 projection; residual when shapes match."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers: List[nn.Module] = []
        if expand != 1:
            layers.append(_conv_bn_relu6(cin, hidden, 1))
        layers += [_conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res else self.conv(x)


#: (expansion t, output channels c, repeats n, first stride s), the paper's Table 2
MOBILENET_V2_SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                         (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0) -> None:
        super().__init__()

        def ch(c: float) -> int:   # round to a multiple of 8, as the reference does
            v = max(8, int(c + 4) // 8 * 8)
            return v + 8 if v < 0.9 * c else v

        cin = ch(32 * width_mult)
        last = ch(1280 * max(1.0, width_mult))
        feats: List[nn.Module] = [_conv_bn_relu6(3, cin, 3, 2)]
        for t, c, n, s in MOBILENET_V2_SETTINGS:
            cout = ch(c * width_mult)
            for i in range(n):
                feats.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        feats.append(_conv_bn_relu6(cin, last, 1))
        self.features = nn.Sequential(*feats)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))
        # fan_in, not torchvision's fan_out: fan_out counts a depthwise filter's
        # outputs once per channel, so every depthwise layer shrank the signal and
        # the features of a random model vanished (~1e-8): the logits were the
        # classifier's bias alone and a compiled run matched eager whatever it computed.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.classifier(x)


def mobilenet_v2(num_classes: int = 1000, width_mult: float = 1.0) -> MobileNetV2:
    """MobileNetV2 (random weights)."""
    return MobileNetV2(num_classes, width_mult)


class ONet(nn.Module):
    """MTCNN's output network; module names match facenet-pytorch's ``onet.pt``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, kernel_size=3)
        self.prelu1 = nn.PReLU(32)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3)
        self.prelu2 = nn.PReLU(64)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3 = nn.Conv2d(64, 64, kernel_size=3)
        self.prelu3 = nn.PReLU(64)
        self.pool3 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv4 = nn.Conv2d(64, 128, kernel_size=2)
        self.prelu4 = nn.PReLU(128)
        self.dense5 = nn.Linear(1152, 256)
        self.prelu5 = nn.PReLU(256)
        self.dense6_1 = nn.Linear(256, 2)
        self.softmax6_1 = nn.Softmax(dim=1)
        self.dense6_2 = nn.Linear(256, 4)
        self.dense6_3 = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.pool3(self.prelu3(self.conv3(x)))
        x = self.prelu4(self.conv4(x))
        x = x.permute(0, 3, 2, 1).contiguous()
        x = self.prelu5(self.dense5(x.view(x.shape[0], -1)))
        prob = self.softmax6_1(self.dense6_1(x))
        # the three heads as one tensor: box (4), landmarks (10), face probability (2)
        return torch.cat([self.dense6_2(x), self.dense6_3(x), prob], dim=1)


def onet_weights_path() -> Optional[str]:
    """Where the installed ``facenet-pytorch`` package keeps ``onet.pt`` (found
    without importing the package, which needs torchvision); None if absent."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("facenet_pytorch")
    if spec is None or not spec.submodule_search_locations:
        return None
    for d in spec.submodule_search_locations:
        p = os.path.join(d, "data", "onet.pt")
        if os.path.isfile(p):
            return p
    return None


def onet_pretrained(path: str) -> ONet:
    """ONet with the real weights at ``path`` (loaded as plain tensors only)."""
    m = ONet()
    m.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return m.eval()
