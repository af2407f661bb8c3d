"""Tiny CNNs built from `torch.nn` the way torchvision defines them (torchvision itself does not import
beside the CPU torch wheel): ResNet's BasicBlock and Bottleneck, MobileNetV3's inverted residual and
EfficientNet's MBConv, each with torchvision's layer order and weight initialisation, at widths that
keep a compile short. Stochastic depth is disabled (p = 0) and classifier dropout is 0, so a training
step is a deterministic function of the weights and the batch.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
            act: Callable[[], nn.Module] | None = None) -> nn.Sequential:
    """torchvision's Conv2dNormActivation: conv (no bias, 'same' padding) → BatchNorm → activation."""
    layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


def init_like_torchvision(model: nn.Module, linear_weight) -> None:
    """torchvision's initialisation of its mobile CNNs: Kaiming (fan-out) convolutions, unit BatchNorm,
    zero biases; `linear_weight` initialises the classifier's weights (it differs between families)."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            linear_weight(m.weight)
            nn.init.zeros_(m.bias)


# ---------------------------------------------------------------------------------------------
# ResNet (torchvision.models.resnet)
# ---------------------------------------------------------------------------------------------

class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class TinyResNet(nn.Module):
    """torchvision's ResNet layout (7×7 stem, max pool, stages, global pool, fc): one BasicBlock stage,
    one strided BasicBlock stage with a projection shortcut, one strided Bottleneck stage."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.inplanes = 16
        self.layer1 = self._make_layer(BasicBlock, 16, 1)
        self.layer2 = self._make_layer(BasicBlock, 32, 2)
        self.layer3 = self._make_layer(Bottleneck, 16, 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16 * Bottleneck.expansion, classes)
        for m in self.modules():  # torchvision's initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def _make_layer(self, block, planes: int, stride: int) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes * block.expansion))
        layer = block(self.inplanes, planes, stride, downsample)
        self.inplanes = planes * block.expansion
        return nn.Sequential(layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ---------------------------------------------------------------------------------------------
# MobileNetV3 (torchvision.models.mobilenetv3, torchvision.ops.SqueezeExcitation)
# ---------------------------------------------------------------------------------------------

class SqueezeExcitation(nn.Module):
    """Global average pool → 1×1 conv → activation → 1×1 conv → gate, multiplied into the input."""

    def __init__(self, channels: int, squeeze: int, activation=nn.ReLU, gate=nn.Sigmoid) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = activation()
        self.scale_activation = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class InvertedResidual(nn.Module):
    """MobileNetV3's block: 1×1 expand, depthwise k×k, squeeze-excitation (hardsigmoid gate), 1×1 project."""

    def __init__(self, cin: int, kernel: int, expanded: int, cout: int, use_se: bool, use_hs: bool,
                 stride: int) -> None:
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        act = nn.Hardswish if use_hs else nn.ReLU
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(conv_bn(cin, expanded, 1, act=act))
        layers.append(conv_bn(expanded, expanded, kernel, stride, groups=expanded, act=act))
        if use_se:
            layers.append(SqueezeExcitation(expanded, _make_divisible(expanded // 4), gate=nn.Hardsigmoid))
        layers.append(conv_bn(expanded, cout, 1))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return out + x if self.use_res_connect else out


class TinyMobileNetV3(nn.Module):
    """MobileNetV3-Small's layout: hardswish stem, three inverted residuals, 1×1 conv, pool, classifier."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 16, 3, 2, act=nn.Hardswish),
            InvertedResidual(16, 3, 16, 16, use_se=True, use_hs=False, stride=2),
            InvertedResidual(16, 3, 48, 24, use_se=False, use_hs=False, stride=2),
            InvertedResidual(24, 5, 64, 24, use_se=True, use_hs=True, stride=1),
            conv_bn(24, 64, 1, act=nn.Hardswish),
        )
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(64, 64), nn.Hardswish(inplace=True), nn.Dropout(0.0),
                                        nn.Linear(64, classes))
        init_like_torchvision(self, lambda w: nn.init.normal_(w, 0, 0.01))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# ---------------------------------------------------------------------------------------------
# EfficientNet (torchvision.models.efficientnet)
# ---------------------------------------------------------------------------------------------

class StochasticDepth(nn.Module):
    """torchvision.ops.StochasticDepth at p = 0: the identity in training and in evaluation."""

    def __init__(self, p: float) -> None:
        super().__init__()
        if p != 0.0:
            raise ValueError("the zoo keeps stochastic depth off so a step is deterministic")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class MBConv(nn.Module):
    """EfficientNet's block: 1×1 expand, depthwise k×k, squeeze-excitation (SiLU, sigmoid), 1×1 project."""

    def __init__(self, cin: int, expand_ratio: int, kernel: int, stride: int, cout: int) -> None:
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        expanded = _make_divisible(cin * expand_ratio)
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(conv_bn(cin, expanded, 1, act=nn.SiLU))
        layers.append(conv_bn(expanded, expanded, kernel, stride, groups=expanded, act=nn.SiLU))
        layers.append(SqueezeExcitation(expanded, max(1, cin // 4), activation=nn.SiLU))
        layers.append(conv_bn(expanded, cout, 1))
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return self.stochastic_depth(out) + x if self.use_res_connect else out


class TinyEfficientNet(nn.Module):
    """EfficientNet-B0's layout: SiLU stem, MBConv stages (expand 1, then 4), 1×1 head, pool, classifier."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 16, 3, 2, act=nn.SiLU),
            MBConv(16, 1, 3, 1, 16),
            MBConv(16, 4, 3, 2, 24),
            MBConv(24, 4, 5, 1, 24),
            conv_bn(24, 64, 1, act=nn.SiLU),
        )
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.0), nn.Linear(64, classes))
        init_like_torchvision(self, lambda w: nn.init.uniform_(w, -w.shape[0] ** -0.5, w.shape[0] ** -0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))
