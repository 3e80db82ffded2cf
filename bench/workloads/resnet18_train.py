# SPDX-License-Identifier: Apache-2.0
"""ResNet-18 trained on the CPU, as a realistic convolutional workload for
measuring what tracing costs: torchvision's resnet18(num_classes=10), randomly
initialised, fed one fixed batch of random images (seed 0), cross-entropy loss,
SGD(lr=0.01, momentum=0.9). Each step (zero_grad, forward, loss, backward,
optimizer step) is timed on its own; the warm-up steps are dropped and the
median of the rest is printed as `resnet18_train: N steps, median step X us`.

Usage: resnet18_train.py STEPS [--batch B (16)] [--size S (64)] [--warmup W (3)] [--profiler]

--profiler runs the timed loop inside torch.profiler (CPU activity, nothing
exported: the cost a user pays for leaving it on) and then prints
`profiler: K events`. Torch's default thread count is kept on purpose."""
import torch
import torchvision

import steps


def main():
    args = steps.parser(__doc__, batch=16, size=64).parse_args()
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch, 3, args.size, args.size)
    y = torch.randint(0, 10, (args.batch,))
    steps.train_and_report("resnet18_train", args, model, opt, x, y, torch.nn.functional.cross_entropy)


if __name__ == "__main__":
    main()
