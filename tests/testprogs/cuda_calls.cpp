// SPDX-License-Identifier: Apache-2.0
// Calls every traced CUDA runtime function a known number of times with known
// arguments, in this process and in a forked child. Without a GPU driver each
// call fails at once with cudaErrorInsufficientDriver (35), after entering
// libcudart, which is what the probes see. The e2e tests assert these exact
// calls; keep the two in step.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

namespace demo {
// Host stubs: the addresses cudaLaunchKernel receives, named like kernels.
__attribute__((noinline)) void saxpy_kernel(float a, float *x, int n) { x[n] *= a; }
__attribute__((noinline)) void reduce_kernel(const float *in, float *out) { *out = *in; }
} // namespace demo

static void *P(unsigned long v) { return reinterpret_cast<void *>(v); }
static cudaStream_t S(unsigned long v) { return reinterpret_cast<cudaStream_t>(v); }

static int parent_calls()
{
	int errors = 0;
	void *d = nullptr;
	errors += cudaMalloc(&d, 1024) != cudaSuccess;
	errors += cudaMalloc(&d, 2048) != cudaSuccess;
	errors += cudaFree(P(0x1000)) != cudaSuccess;
	void *h = nullptr;
	errors += cudaMallocHost(&h, 4096) != cudaSuccess;
	errors += cudaFreeHost(P(0x2000)) != cudaSuccess;
	for (int i = 0; i < 3; i++)
		errors += cudaMemcpy(P(0x3000), P(0x4000), 512, cudaMemcpyHostToDevice) != cudaSuccess;
	errors += cudaMemcpy(P(0x4000), P(0x3000), 512, cudaMemcpyDeviceToHost) != cudaSuccess;
	errors += cudaMemcpyAsync(P(0x3000), P(0x3800), 256, cudaMemcpyDeviceToDevice, S(0x5000)) != cudaSuccess;
	errors += cudaMemset(P(0x6000), 7, 128) != cudaSuccess;
	errors += cudaMemsetAsync(P(0x6000), 9, 64, S(0x5000)) != cudaSuccess;
	float a = 2.0f;
	float *x = nullptr;
	int n = 256;
	void *args[] = {&a, &x, &n};
	// The handle CUDA 12+ host code launches by, left as preset: without a
	// driver the call fails, and a launch by it is not named after the stub.
	cudaKernel_t handle = reinterpret_cast<cudaKernel_t>(0xa000);
	errors += cudaGetKernel(&handle, (const void *)&demo::saxpy_kernel) != cudaSuccess;
	errors += cudaLaunchKernel((const void *)handle, dim3(1, 1, 1), dim3(32, 1, 1), args, 0, S(0x5000)) !=
		cudaSuccess;
	errors += cudaLaunchKernel((const void *)&demo::saxpy_kernel, dim3(4, 2, 1), dim3(128, 1, 1), args, 256,
				   S(0x5000)) != cudaSuccess;
	errors += cudaStreamSynchronize(S(0x5000)) != cudaSuccess;
	errors += cudaDeviceSynchronize() != cudaSuccess;
	errors += cudaEventRecord(reinterpret_cast<cudaEvent_t>(0x7000), S(0x5000)) != cudaSuccess;
	errors += cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(0x7000)) != cudaSuccess;
	errors += cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(0x8000), S(0x5000)) != cudaSuccess;
	return errors;
}

static int child_calls()
{
	int errors = 0;
	void *d = nullptr;
	for (int i = 0; i < 3; i++)
		errors += cudaMalloc(&d, 4096) != cudaSuccess;
	const float *in = nullptr;
	float *out = nullptr;
	void *args[] = {&in, &out};
	for (int i = 0; i < 2; i++)
		errors += cudaLaunchKernel((const void *)&demo::reduce_kernel, dim3(8, 8, 2), dim3(16, 16, 1), args, 0,
					   S(0x9000)) != cudaSuccess;
	errors += cudaMemcpy(P(0x4000), P(0x3000), 8192, cudaMemcpyDeviceToHost) != cudaSuccess;
	return errors;
}

int main(int argc, char **argv)
{
	int exit_code = argc > 1 ? atoi(argv[1]) : 0;
	int failed = parent_calls();
	pid_t child = fork();
	if (child == 0)
		_exit(child_calls() == 6 ? 0 : 1); // all six fail without a driver
	int status = 0;
	waitpid(child, &status, 0);
	printf("cuda_calls: %d parent calls failed (no driver: expected 20), child exit %d\n", failed,
	       WEXITSTATUS(status));
	return exit_code;
}
