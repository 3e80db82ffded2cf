# SPDX-License-Identifier: Apache-2.0
"""Records tests/testprogs/nccl_calls (the real libnccl, no GPU: a null
communicator makes every collective fail at once) and checks each call."""
import collections
import os
import unittest

import eacgm_e2e as E

NCCL_CALLS = os.path.join(E.TESTPROGS, "nccl_calls")
SIZES = [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1]  # ncclDataType_t 0..11, from nccl.h
TYPES = ["ncclInt8", "ncclUint8", "ncclInt32", "ncclUint32", "ncclInt64", "ncclUint64", "ncclFloat16",
         "ncclFloat32", "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"]
BUF = {"sendbuff": "0x1000", "recvbuff": "0x2000"}
S = {"comm": "0x0", "stream": "0x30"}
BAD = "ncclInvalidArgument"


class NcclRecording(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        cls.rec = E.record(cls.tmp, [NCCL_CALLS], "--layers", "nccl")
        cls.spans = cls.rec.spans()

    def calls(self, name):
        return [(s["args"], s["ret_name"], s["bytes"]) for s in self.spans if s["name"] == name]

    def test_exit_and_layer(self):
        self.assertEqual(self.rec.rc, 0, self.rec.stderr)
        self.assertEqual({s["layer"] for s in self.spans}, {"nccl"})
        self.assertEqual(E.drops(self.rec.db), {r: 0 for r in E.DROP_REASONS})

    def test_all_reduce_bytes_for_every_datatype(self):
        got = self.calls("ncclAllReduce")
        want = [({**BUF, "count": 1000 + t, "datatype": TYPES[t], "op": "ncclSum", **S}, BAD, (1000 + t) * SIZES[t])
                for t in range(12)]
        want.append(({**BUF, "count": 64, "datatype": "ncclFloat32", "op": "ncclMax", **S}, BAD, 256))
        self.assertEqual(got, want)

    def test_collectives_and_point_to_point(self):
        self.assertEqual(self.calls("ncclReduce"), [
            ({**BUF, "count": 256, "datatype": "ncclFloat16", "op": "ncclProd", "root": 1, **S}, BAD, 512)])
        self.assertEqual(self.calls("ncclBcast"), [
            ({"buff": "0x1000", "count": 128, "datatype": "ncclUint8", "root": 3, **S}, BAD, 128)])
        self.assertEqual(self.calls("ncclAllGather"), [
            ({**BUF, "sendcount": 300, "datatype": "ncclBfloat16", **S}, BAD, 600)])
        self.assertEqual(self.calls("ncclReduceScatter"), [
            ({**BUF, "recvcount": 400, "datatype": "ncclFloat64", "op": "ncclAvg", **S}, BAD, 3200)])
        self.assertEqual(self.calls("ncclAlltoAll"), [({**BUF, "count": 50, "datatype": "ncclInt32", **S}, BAD, 200)])
        self.assertEqual(self.calls("ncclSend"), [
            ({"sendbuff": "0x1000", "count": 10, "datatype": "ncclFloat32", "peer": p, **S}, BAD, 40) for p in (0, 1)])
        self.assertEqual(self.calls("ncclRecv"), [
            ({"recvbuff": "0x2000", "count": 20, "datatype": "ncclFloat32", "peer": p, **S}, BAD, 80) for p in (0, 1)])
        self.assertEqual(self.calls("ncclGroupStart"), [({}, "ncclSuccess", 0)])
        self.assertEqual(self.calls("ncclGroupEnd"), [({}, BAD, 0)])  # the group's calls failed
        self.assertEqual(self.calls("ncclCommDestroy"), [({"comm": "0x0"}, "ncclSuccess", 0)])
        self.assertEqual(self.calls("ncclCommAbort"), [({"comm": "0x0"}, "ncclSuccess", 0)])

    def test_broadcast_inside_bcast(self):
        # ncclBcast is implemented by calling ncclBroadcast: both are traced, nested.
        bcast = [s for s in self.spans if s["name"] == "ncclBcast"]
        bro = sorted((s for s in self.spans if s["name"] == "ncclBroadcast"), key=lambda s: s["depth"])
        self.assertEqual([s["depth"] for s in bro], [0, 1])
        self.assertEqual(bro[0]["args"], {**BUF, "count": 512, "datatype": "ncclInt64", "root": 2, **S})
        self.assertEqual(bro[0]["bytes"], 4096)
        inner = bro[1]
        self.assertTrue(E.contains(E.span_as_event(bcast[0]), E.span_as_event(inner), tol=0))
        self.assertEqual((inner["args"]["count"], inner["args"]["datatype"], inner["args"]["root"]),
                         (128, "ncclUint8", 3))

    def test_exact_call_counts(self):
        counts = collections.Counter(s["name"] for s in self.spans)
        self.assertEqual(counts, {"ncclAllReduce": 13, "ncclReduce": 1, "ncclBroadcast": 2, "ncclBcast": 1,
                                  "ncclAllGather": 1, "ncclReduceScatter": 1, "ncclAlltoAll": 1, "ncclSend": 2,
                                  "ncclRecv": 2, "ncclGroupStart": 1, "ncclGroupEnd": 1, "ncclCommDestroy": 1,
                                  "ncclCommAbort": 1})

    def test_aliases_attached_once(self):
        # ncclAllReduce (weak) and pncclAllReduce share an address: one span per call, public name.
        self.assertFalse(any(s["name"].startswith("pnccl") for s in self.spans))


if __name__ == "__main__":
    unittest.main()
