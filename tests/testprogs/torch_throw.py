# SPDX-License-Identifier: Apache-2.0
"""Torch operators that fail, caught in Python, between ordinary training
steps (tests/e2e/test_exceptions.py runs it untraced and under eacgm and
compares what it prints byte for byte). Each of STEPS steps trains a
Linear(8, 4) once, then makes four calls that raise: torch.mm of shapes that
do not multiply (RuntimeError), torch.cat of shapes that do not join
(RuntimeError), index_select past the end (IndexError), and the Linear on
an input of the wrong width (RuntimeError, from addmm inside linear). Prints
each error's type and first line, the count caught and the final loss.
Usage: torch_throw.py [STEPS (10)]"""
import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Linear(8, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 8), torch.randn(16, 4)
bad = [
    lambda: torch.mm(torch.ones(2, 3), torch.ones(2, 3)),
    lambda: torch.cat([torch.ones(2, 3), torch.ones(2, 4)], dim=0),
    lambda: torch.index_select(torch.ones(3), 0, torch.tensor([5])),
    lambda: model(torch.ones(2, 5)),
]
caught = 0
for step in range(steps):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    for call in bad:
        try:
            call()
        except (RuntimeError, IndexError) as e:
            caught += 1
            print(step, type(e).__name__, str(e).splitlines()[0])
print("caught", caught, "loss %.6f" % loss.item())
