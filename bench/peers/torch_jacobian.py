"""PyTorch's side of nb_eager_jacobian (bench/eager_chain.c): the Jacobian dy/dx of
y = 10 steps on 1x64 float32 of the chain tanh(x * w + b) and of an MLP tanh(x @ W + b)
(W 64x64), with torch.autograd.functional.jacobian vectorized (one batched backward
pass, vmap) and as a loop, 1 thread, median of 7 runs after a warm-up. Its time includes
one forward pass (about 30 ops), which nabla's tape has already recorded. Needs PyTorch (run it with the python3 that has torch); not used by the tests or CI."""
import statistics
import time

import torch

WIDTH, STEPS, RUNS = 64, 10, 7


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, w, b = (torch.rand(1, WIDTH) - 0.5 for _ in range(3))
    big_w = (torch.rand(WIDTH, WIDTH) - 0.5) * 0.5

    def chain(x):
        for _ in range(STEPS):
            x = torch.tanh(x * w + b)
        return x

    def mlp(x):
        for _ in range(STEPS):
            x = torch.tanh(x @ big_w + b)
        return x

    for model, f in (("chain", chain), ("mlp", mlp)):
        for vectorize in (True, False):
            times = []
            for _ in range(RUNS + 1):
                t0 = time.perf_counter()
                torch.autograd.functional.jacobian(f, x, vectorize=vectorize)
                times.append((time.perf_counter() - t0) * 1e6)
            print(f"name=torch_jacobian model={model} shape=1x{WIDTH} steps={STEPS} threads=1 runs={RUNS} "
                  f"path={'vectorized' if vectorize else 'loop'} us={statistics.median(times[1:]):.1f} "
                  f"torch={torch.__version__}")


if __name__ == "__main__":
    main()
