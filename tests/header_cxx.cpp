// The public header compiles as C++ and its functions link from C++.
#include <nabla.h>

#include <cstdio>

int main() {
  nb_ctx *c = nb_eager_new();
  const int64_t shape[1] = {3};
  const float v[3] = {1.0f, 2.0f, 3.0f};
  nb_tensor *x = nb_tensor_from(c, NB_F32, 1, shape, v);
  nb_tensor *y = nb_add(c, x, x);
  float out[3] = {0, 0, 0};
  nb_code code = nb_read(y, out, sizeof out);
  nb_ctx_free(c);
  if (code != NB_OK || out[2] != 6.0f) {
    std::fprintf(stderr, "C++ use of nabla.h failed\n");
    return 1;
  }
  std::printf("1 passed, 0 failed\n");
  return 0;
}
