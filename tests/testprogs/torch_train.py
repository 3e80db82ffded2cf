# SPDX-License-Identifier: Apache-2.0
"""A small model trained on the CPU: LAYERS Linear layers of WIDTH (each
followed by ReLU), batches of BATCH, MSE loss, plain SGD, STEPS steps.
Usage: torch_train.py LAYERS STEPS [WIDTH [BATCH]] (default 32, 8).
The torch e2e test and the benchmark count on its exact operator calls."""
import sys
import time

import torch

layers, steps = int(sys.argv[1]), int(sys.argv[2])
width = int(sys.argv[3]) if len(sys.argv) > 3 else 32
batch = int(sys.argv[4]) if len(sys.argv) > 4 else 8
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(*[m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())])
opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)
x, y = torch.randn(batch, width), torch.randn(batch, width)
times = []
for _ in range(steps):
    t = time.perf_counter()
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t)
times.sort()
print("torch_train: %d steps, median step %.1f us" % (steps, 1e6 * times[len(times) // 2]))
