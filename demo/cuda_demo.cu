// A small CUDA program with the shape of a training loop: allocate, copy in,
// launch kernels, copy out, synchronise. `make demo` records it with eacgm.
// On a machine without a GPU driver every call fails at once with
// cudaErrorInsufficientDriver, but each still enters libcudart, so the
// recording shows the calls, their arguments, kernel names and error codes.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void scale(float *x, float a, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] *= a;
}

__global__ void add(const float *a, const float *b, float *out, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		out[i] = a[i] + b[i];
}

int main()
{
	const int n = 1 << 20, steps = 5;
	const size_t bytes = n * sizeof(float);
	static float host[1 << 20];
	float *a = nullptr, *b = nullptr, *out = nullptr;
	cudaStream_t stream = nullptr;
	cudaError_t first = cudaMalloc(&a, bytes);
	cudaMalloc(&b, bytes);
	cudaMalloc(&out, bytes);
	for (int step = 0; step < steps; step++) {
		cudaMemcpyAsync(a, host, bytes, cudaMemcpyHostToDevice, stream);
		cudaMemcpyAsync(b, host, bytes, cudaMemcpyHostToDevice, stream);
		scale<<<(n + 255) / 256, 256, 0, stream>>>(a, 0.5f, n);
		add<<<dim3((n + 127) / 128), dim3(128), 0, stream>>>(a, b, out, n);
		cudaMemcpyAsync(host, out, bytes, cudaMemcpyDeviceToHost, stream);
		cudaStreamSynchronize(stream);
	}
	cudaDeviceSynchronize();
	cudaFree(a);
	cudaFree(b);
	cudaFree(out);
	printf("cuda_demo: %d steps; first cudaMalloc returned %d (%s)\n", steps, (int)first,
	       cudaGetErrorName(first));
	return 0;
}
