# SPDX-License-Identifier: Apache-2.0
"""Records a small CPU training run of Debian's PyTorch (libtorch_cpu's
at::_ops::<op>::call entry points) and checks the operator spans exactly."""
import collections
import json
import os
import subprocess
import unittest

import eacgm_e2e as E

TRAIN = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "torch_train.py")
LAYERS, STEPS = 3, 5


class TorchRecording(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        cls.rec = E.record(cls.tmp, ["/usr/bin/python3", TRAIN, str(LAYERS), str(STEPS)], "--layers", "torch")
        cls.spans = cls.rec.spans()
        cls.count = collections.Counter(s["name"] for s in cls.spans)

    def test_recording(self):
        self.assertEqual(self.rec.rc, 0, self.rec.stderr)
        self.assertEqual({s["layer"] for s in self.spans}, {"torch"})
        self.assertEqual(E.drops(self.rec.db), {r: 0 for r in E.DROP_REASONS})

    def test_one_linear_per_layer_and_step_each_with_its_addmm(self):
        linear = [s for s in self.spans if s["name"] == "aten::linear"]
        addmm = [s for s in self.spans if s["name"] == "aten::addmm"]
        self.assertEqual(len(linear), LAYERS * STEPS)
        self.assertEqual(len(addmm), LAYERS * STEPS)
        for lin in linear:
            inside = [a for a in addmm if a["tid"] == lin["tid"] and
                      E.contains(E.span_as_event(lin), E.span_as_event(a), tol=0)]
            self.assertEqual(len(inside), 1, lin)
            self.assertEqual(inside[0]["depth"], lin["depth"] + 1)

    def test_tensor_shapes(self):
        # Linear(32, 32) on a batch of 8: input and weight; addmm(bias, input, weight.t()).
        for s in self.spans:
            if s["name"] == "aten::linear":
                self.assertEqual(s["args"], {"in0": "float32[8, 32]", "in1": "float32[32, 32]"})
            if s["name"] == "aten::addmm":
                self.assertEqual(s["args"], {"in0": "float32[32]", "in1": "float32[8, 32]"})
            if s["name"] == "aten::mse_loss":
                self.assertEqual(s["args"], {"in0": "float32[8, 32]", "in1": "float32[8, 32]"})
        # Backward: grad of a weight (input.t() @ grad) and of an input (grad @ weight).
        mm = collections.Counter(json.dumps(s["args"], sort_keys=True) for s in self.spans if s["name"] == "aten::mm")
        self.assertEqual(mm, {json.dumps({"in0": "float32[32, 8]", "in1": "float32[8, 32]"}): STEPS * LAYERS,
                              json.dumps({"in0": "float32[8, 32]", "in1": "float32[32, 32]"}): STEPS * (LAYERS - 1)})

    def test_layout_matches_the_installed_torch(self):
        # specs/torch.json's TensorImpl offsets, measured again on this machine's torch.
        out = subprocess.run(["/usr/bin/python3", os.path.join(E.SOURCE_DIR, "scripts", "torch-layout.py")],
                             capture_output=True, text=True, check=True).stdout
        with open(os.path.join(E.SOURCE_DIR, "specs", "torch.json")) as f:
            spec = json.load(f)
        for version, layout in json.loads(out).items():
            self.assertEqual(spec["tensor_layouts"].get(version), layout)

    def test_forward_and_backward_operators(self):
        # Backward of addmm: weight grads for every layer, input grads for all but the first.
        self.assertEqual(self.count["aten::mm"], STEPS * (2 * LAYERS - 1))
        self.assertEqual(self.count["aten::relu"], STEPS * LAYERS)
        self.assertEqual(self.count["aten::threshold_backward"], STEPS * LAYERS)
        self.assertEqual(self.count["aten::mse_loss"], STEPS)
        self.assertEqual(self.count["aten::mse_loss_backward"], STEPS)
        # Elementwise arithmetic is not in the default set.
        self.assertNotIn("aten::add_", self.count)
        linear = [E.span_as_event(s) for s in self.spans if s["name"] == "aten::linear"]
        for s in self.spans:
            if s["name"] in ("aten::mm", "aten::threshold_backward", "aten::mse_loss_backward"):
                # Run by the autograd engine, outside any forward op.
                self.assertFalse(any(E.contains(l, E.span_as_event(s), tol=0) for l in linear), s)

    def test_torch_ops_adds_operators(self):
        # Operator names as in at::_ops: an overload is joined with "_" (add_.Tensor is add__Tensor).
        rec = E.record(self.tmp, ["/usr/bin/python3", TRAIN, "2", "3"], "--layers", "torch", "--torch-ops",
                       "add__Tensor,zero_", name="ops")
        self.assertEqual(rec.rc, 0, rec.stderr)
        count = collections.Counter(s["name"] for s in rec.spans())
        # The counts torch.profiler reports for this run (aten::add_ 20, aten::zero_ 17).
        self.assertEqual(count["aten::add__Tensor"], 20)
        self.assertEqual(count["aten::zero_"], 17)
        self.assertEqual(count["aten::linear"], 2 * 3)

    def test_torch_ops_errors(self):
        r = E.eacgm("record", "-o", os.path.join(self.tmp, "x.db"), "--layers", "torch", "--torch-ops", "no_such_op",
                    "--", "/usr/bin/python3", TRAIN, "1", "1")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("matches no function", r.stderr)
        self.assertIn("libtorch_cpu", r.stderr)
        r = E.eacgm("record", "-o", os.path.join(self.tmp, "y.db"), "--layers", "cuda", "--torch-ops", "add_",
                    "--", "true")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--torch-ops needs the torch layer", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "x.db")))


if __name__ == "__main__":
    unittest.main()
