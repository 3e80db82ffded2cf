// SPDX-License-Identifier: Apache-2.0
// Makes each traced NCCL call a known number of times with known counts and
// datatypes. Without a GPU there is no communicator: the collectives get a
// null one and fail at once; the probes still see every argument. The e2e
// tests assert these exact calls; keep the two in step.
#include <cstdio>
#include <cuda_runtime_api.h>
#include <nccl.h>

static void *P(unsigned long v) { return reinterpret_cast<void *>(v); }
static cudaStream_t S(unsigned long v) { return reinterpret_cast<cudaStream_t>(v); }

int main()
{
	ncclComm_t null_comm = nullptr;
	int failed = 0, calls = 0;
	auto check = [&](ncclResult_t r) {
		calls++;
		failed += r != ncclSuccess;
	};
	// One all-reduce per datatype: count 1000 + type, so bytes = count x size.
	for (int t = 0; t < ncclNumTypes; t++)
		check(ncclAllReduce(P(0x1000), P(0x2000), 1000 + t, (ncclDataType_t)t, ncclSum, null_comm, S(0x30)));
	check(ncclAllReduce(P(0x1000), P(0x2000), 64, ncclFloat32, ncclMax, null_comm, S(0x30)));
	check(ncclReduce(P(0x1000), P(0x2000), 256, ncclFloat16, ncclProd, 1, null_comm, S(0x30)));
	check(ncclBroadcast(P(0x1000), P(0x2000), 512, ncclInt64, 2, null_comm, S(0x30)));
	check(ncclBcast(P(0x1000), 128, ncclUint8, 3, null_comm, S(0x30)));
	check(ncclAllGather(P(0x1000), P(0x2000), 300, ncclBfloat16, null_comm, S(0x30)));
	check(ncclReduceScatter(P(0x1000), P(0x2000), 400, ncclFloat64, ncclAvg, null_comm, S(0x30)));
	check(ncclAlltoAll(P(0x1000), P(0x2000), 50, ncclInt32, null_comm, S(0x30)));
	check(ncclGroupStart());
	for (int peer = 0; peer < 2; peer++) {
		check(ncclSend(P(0x1000), 10, ncclFloat32, peer, null_comm, S(0x30)));
		check(ncclRecv(P(0x2000), 20, ncclFloat32, peer, null_comm, S(0x30)));
	}
	check(ncclGroupEnd());
	check(ncclCommDestroy(null_comm));
	check(ncclCommAbort(null_comm));
	printf("nccl_calls: %d calls, %d failed\n", calls, failed);
	return 0;
}
