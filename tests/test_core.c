/* Core: tensors, scopes and flat memory, sticky errors, the generic entry's checks. */
#include "testutil.h"

#include "../src/core/core.h"

static void test_tensor_basics(void **state) {
  nb_ctx *c = *state;
  const double v[6] = {1, 2, 3, 4, 5, 6};
  for (nb_dtype t = NB_F32; t <= NB_BOOL; t++) {
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(2, 3), v);
    tu_check_shape(x, t, 2, TU_SHAPE(2, 3));
    assert_int_equal(nb_num_elements(x), 6);
    assert_int_equal(nb_item(x, 5), t == NB_BOOL ? 1 : 6);
    assert_true(isnan(nb_item(x, 6)));
  }
  nb_tensor *z = nb_tensor_from(c, NB_I64, 1, TU_SHAPE(4), NULL); /* NULL data: zeros */
  tu_check(z, NB_I64, 1, TU_SHAPE(4), TU_VALS(0, 0, 0, 0), 0);
  nb_tensor *s = nb_scalar(c, NB_F64, 2.5);
  tu_check(s, NB_F64, 0, NULL, TU_VALS(2.5), 0);
  double out;
  assert_int_equal(nb_read(s, &out, sizeof out), NB_OK);
  assert_true(out == 2.5);
  assert_int_equal(nb_read(s, &out, 4), NB_SHAPE);
  assert_int_equal(nb_read(NULL, &out, 8), NB_INVALID);
  assert_int_equal(nb_read(s, NULL, 8), NB_INVALID);
  /* rank 8 is allowed, 9 is not */
  const int64_t s8[8] = {1, 2, 1, 2, 1, 2, 1, 2};
  tu_check_shape(nb_tensor_from(c, NB_F32, 8, s8, NULL), NB_F32, 8, s8);
  const int64_t s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  assert_null(nb_tensor_from(c, NB_F32, 9, s9, NULL));
  tu_check_error(c, NB_SHAPE, "nb_tensor_from: rank 9", "[0, 8]");
  /* empty tensors are fine */
  nb_tensor *e = nb_tensor_from(c, NB_F32, 2, TU_SHAPE(0, 5), NULL);
  assert_int_equal(nb_num_elements(e), 0);
  assert_int_equal(nb_read(e, NULL, 0), NB_OK);
  assert_string_equal(nb_dtype_name(NB_I32), "int32");
  assert_int_equal(nb_dtype_size(NB_BOOL), 1);
  assert_string_equal(nb_code_name(NB_NO_GRADIENT), "NB_NO_GRADIENT");
  assert_string_equal(nb_version(), "0.1.0");
}

static void test_tensor_errors(void **state) {
  nb_ctx *c = *state;
  assert_null(nb_tensor_from(c, NB_F32, 2, TU_SHAPE(2, -1), NULL));
  tu_check_error(c, NB_SHAPE, "invalid shape [2,-1]", NULL);
  assert_null(nb_tensor_from(c, NB_F32, 3, TU_SHAPE(1LL << 40, 1LL << 40, 1 << 10), NULL));
  tu_check_error(c, NB_SHAPE, "too large", NULL);
  assert_null(nb_tensor_from(c, (nb_dtype)9, 0, NULL, NULL));
  tu_check_error(c, NB_DTYPE, "invalid dtype 9", NULL);
  assert_null(nb_tensor_from(c, NB_F32, 2, NULL, NULL));
  tu_check_error(c, NB_SHAPE, "with a shape", NULL);
  assert_null(nb_scalar(c, NB_I32, NAN));
  tu_check_error(c, NB_INVALID, "not representable as int32", NULL);
  /* NULL contexts and tensors never crash */
  assert_null(nb_tensor_from(NULL, NB_F32, 0, NULL, NULL));
  assert_null(nb_add(NULL, NULL, NULL));
  assert_int_equal(nb_status(NULL), NB_INVALID);
  assert_int_equal(nb_rank(NULL), -1);
  assert_null(nb_shape(NULL));
  nb_tensor_free(NULL);
  nb_ctx_free(NULL);
  nb_scope_begin(NULL);
  nb_scope_end(NULL, NULL, 0);
  nb_ctx_set_threads(c, 0);
  tu_check_error(c, NB_INVALID, "thread count 0", NULL);
  nb_ctx_set_threads(c, 1 << 20);
  tu_check_error(c, NB_INVALID, "thread count 1048576 must be in [1,", NULL);
  /* scalars must be representable in their dtype */
  assert_null(nb_scalar(c, NB_I32, 1e10));
  tu_check_error(c, NB_INVALID, "nb_scalar: 1e+10 is not representable as int32", NULL);
  assert_null(nb_scalar(c, NB_I64, 2.5));
  tu_check_error(c, NB_INVALID, "not representable as int64", NULL);
  tu_check(nb_scalar(c, NB_I32, -2147483648.0), NB_I32, 0, NULL, TU_VALS(-2147483648.0), 0);
  tu_check(nb_scalar(c, NB_BOOL, -3), NB_BOOL, 0, NULL, TU_VALS(1), 0);
}

/* Outputs whose element count overflows are refused before any allocation, even
   when built from empty inputs. */
static void test_output_too_large(void **state) {
  nb_ctx *c = *state;
  nb_tensor *a = nb_tensor_from(c, NB_F32, 3, TU_SHAPE(1LL << 40, 1, 0), NULL);
  nb_tensor *b = nb_tensor_from(c, NB_F32, 3, TU_SHAPE(1, 1LL << 40, 0), NULL);
  assert_null(nb_add(c, a, b));
  tu_check_error(c, NB_SHAPE, "AddV2: output 0 shape [1099511627776,1099511627776,0] is too large", NULL);
  nb_tensor *x = nb_tensor_from(c, NB_F32, 2, TU_SHAPE(1LL << 31, 0), NULL);
  nb_tensor *y = nb_tensor_from(c, NB_F32, 2, TU_SHAPE(0, 1LL << 31), NULL);
  assert_null(nb_matmul(c, x, y, false, false));
  tu_check_error(c, NB_SHAPE, "MatMul", "too large");
}

/* A failed op leaves no handle behind. */
static void test_errors_leave_no_handles(void **state) {
  nb_ctx *c = *state;
  nb_tensor *a = tu_make(c, NB_F32, 2, TU_SHAPE(2, 3), NULL);
  nb_tensor *i = tu_make(c, NB_I32, 1, TU_SHAPE(2), TU_VALS(0, 9));
  uint32_t before = c->nhandles;
  nb_tensor *outs[3];
  nb_add(c, a, i);
  nb_clear_error(c);
  nb_matmul(c, a, a, false, false);
  nb_clear_error(c);
  nb_gather(c, a, i, 1, 0); /* fails in the kernel, after outputs were allocated */
  nb_clear_error(c);
  nb_unpack(c, a, 0, 3, outs);
  nb_clear_error(c);
  const int64_t shape[2] = {4, 4};
  nb_reshape(c, a, shape, 2);
  nb_clear_error(c);
  const int axes[1] = {5};
  nb_sum(c, a, axes, 1, false);
  nb_clear_error(c);
  assert_int_equal(c->nhandles, before);
}

static void test_sticky_status(void **state) {
  nb_ctx *c = *state;
  nb_tensor *a = tu_make(c, NB_F32, 1, TU_SHAPE(2), TU_VALS(1, 2));
  nb_tensor *b = tu_make(c, NB_F32, 1, TU_SHAPE(3), TU_VALS(1, 2, 3));
  nb_tensor *bad = nb_add(c, a, b);
  /* later calls do nothing and keep the first message */
  nb_tensor *later = nb_mul(c, nb_exp(c, bad), a);
  assert_null(bad);
  assert_null(later);
  assert_null(nb_exp(c, a));
  assert_null(nb_tensor_from(c, NB_F32, 0, NULL, NULL));
  tu_check_error(c, NB_SHAPE, "AddV2: Incompatible shapes: [2] vs. [3]", NULL);
  assert_string_equal(nb_error(c), "");
  assert_non_null(nb_exp(c, a));
  /* a NULL input names the op and the position */
  assert_null(nb_mul(c, a, NULL));
  tu_check_error(c, NB_INVALID, "Mul: input 1 is NULL", NULL);
}

static void test_generic_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *a = tu_make(c, NB_F32, 1, TU_SHAPE(2), TU_VALS(1, 2));
  nb_tensor *in[3] = {a, a, a};
  nb_tensor *out[2];
  assert_int_equal(nb_op(c, "NoSuchOp", in, 1, NULL, 0, out, 1), NB_NOT_FOUND);
  tu_check_error(c, NB_NOT_FOUND, "Op type not registered 'NoSuchOp'", NULL);
  assert_int_equal(nb_op(c, NULL, in, 1, NULL, 0, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "op type is NULL", NULL);
  assert_int_equal(nb_op(c, "AddV2", in, 3, NULL, 0, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "AddV2: expected 2 inputs, got 3", NULL);
  assert_int_equal(nb_op(c, "Tanh", in, 1, NULL, 0, out, 2), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Tanh: has 1 outputs, caller asked for 2", NULL);
  assert_int_equal(nb_op(c, "Tanh", in, 1, NULL, 0, NULL, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Tanh: outputs array is NULL", NULL);
  assert_int_equal(nb_op(c, "Tanh", NULL, 1, NULL, 0, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Tanh: inputs array is NULL", NULL);
  nb_attr bogus = nb_attr_int("bogus", 1);
  assert_int_equal(nb_op(c, "Tanh", in, 1, &bogus, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Tanh: unknown attr 'bogus'", NULL);
  nb_attr wrong_kind = nb_attr_int("DstT", 1);
  assert_int_equal(nb_op(c, "Cast", in, 1, &wrong_kind, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Cast: attr 'DstT' has the wrong kind", NULL);
  nb_attr t_int = nb_attr_int("T", 1);
  assert_int_equal(nb_op(c, "Tanh", in, 1, &t_int, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "attr 'T' must be a type", NULL);
  nb_attr unnamed = nb_attr_int(NULL, 1);
  assert_int_equal(nb_op(c, "Tanh", in, 1, &unnamed, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "attr 0 has no name", NULL);
  assert_int_equal(nb_op(c, "Tanh", in, 1, NULL, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "attrs array is NULL", NULL);
  assert_int_equal(nb_op(NULL, "Tanh", in, 1, NULL, 0, out, 1), NB_INVALID);
}

/* Builds a few temporaries per iteration inside a scope and checks nothing grows. */
static void test_scope_flat_memory(void **state) {
  nb_ctx *c = *state;
  nb_tensor *w = tu_make(c, NB_F32, 2, TU_SHAPE(4, 8), NULL);
  nb_tensor *acc = nb_scalar(c, NB_F32, 0);
  uint32_t handles_before = c->nhandles;
  size_t cached = 0;
  const void *seen[8];
  int nseen = 0;
  for (int it = 0; it < 20000; it++) {
    nb_scope_begin(c);
    nb_tensor *y = nb_tanh(c, nb_add(c, nb_mul(c, w, nb_scalar(c, NB_F32, 0.5)), w));
    nb_tensor *next = nb_add(c, acc, nb_scalar(c, NB_F32, 1));
    if (it == 1) cached = c->pool.cached_bytes;
    /* buffers come back from the pool: y cycles through a few blocks, never new ones */
    int k = 0;
    while (k < nseen && seen[k] != nb_data(y)) k++;
    if (k == nseen) {
      assert_true(nseen < 4);
      seen[nseen++] = nb_data(y);
    }
    nb_scope_end(c, &next, 1);
    nb_tensor_free(acc); /* the previous accumulator: early release */
    acc = next;
  }
  assert_int_equal(nb_status(c), NB_OK);
  assert_true(c->nhandles <= handles_before + 130); /* holes are squeezed out in batches */
  assert_true(c->handles_cap <= 512);
  assert_true(c->pool.cached_bytes <= cached + 4096);
  assert_true(nb_item(acc, 0) == 20000);
}

static void test_scope_nesting(void **state) {
  nb_ctx *c = *state;
  nb_tensor *outer = nb_scalar(c, NB_F64, 1);
  nb_scope_begin(c);
  nb_tensor *a = nb_scalar(c, NB_F64, 2);
  nb_scope_begin(c);
  nb_tensor *b = nb_add(c, a, outer);
  nb_tensor *dropped = nb_mul(c, b, b);
  (void)dropped;
  nb_tensor *keep[3] = {b, NULL, outer}; /* NULL and outer-scope entries are ignored */
  nb_scope_end(c, keep, 3);
  nb_scope_end(c, &b, 1);
  tu_check(b, NB_F64, 0, NULL, TU_VALS(3), 0);
  tu_check(outer, NB_F64, 0, NULL, TU_VALS(1), 0);
  nb_scope_end(c, NULL, 0);
  tu_check_error(c, NB_INVALID, "nb_scope_end without a matching nb_scope_begin", NULL);
  /* freeing early inside a scope then ending it does not double free */
  nb_scope_begin(c);
  nb_tensor *t = nb_scalar(c, NB_F32, 1);
  nb_tensor *u = nb_scalar(c, NB_F32, 2);
  nb_tensor_free(t);
  nb_scope_end(c, &u, 1);
  tu_check(u, NB_F32, 0, NULL, TU_VALS(2), 0);
}

/* Views keep their buffer alive after the source handle is freed. */
static void test_views_refcount(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_I32, 1, TU_SHAPE(3), TU_VALS(7, 8, 9));
  nb_tensor *v = nb_identity(c, x);
  nb_tensor_free(x);
  nb_scope_begin(c);
  nb_tensor *tmp = nb_scalar(c, NB_I32, 0); /* may reuse pooled memory: must not be v's */
  (void)tmp;
  nb_scope_end(c, NULL, 0);
  tu_check(v, NB_I32, 1, TU_SHAPE(3), TU_VALS(7, 8, 9), 0);
}

/* A tensor from one context can be an input in another. */
static void test_cross_context(void **state) {
  nb_ctx *c = *state;
  nb_ctx *d = nb_eager_new();
  nb_tensor *x = tu_make(c, NB_F32, 1, TU_SHAPE(2), TU_VALS(1, 2));
  nb_tensor *y = nb_identity(d, x);
  nb_tensor *z = nb_add(d, y, x);
  nb_tensor_free(x);
  tu_check(z, NB_F32, 1, TU_SHAPE(2), TU_VALS(2, 4), 0);
  tu_check(y, NB_F32, 1, TU_SHAPE(2), TU_VALS(1, 2), 0);
  nb_ctx_free(d);
}

/* Buffer views: a view shares its block's bytes, holds the block until it goes, is never
   exclusive (nothing may write it in place), and a view of a view holds the block itself. */
static void test_buffer_views(void **state) {
  nb_ctx *c = *state;
  nbcore_buffer *block = nbcore_buffer_new(c, 64);
  assert_non_null(block);
  for (int i = 0; i < 16; i++) ((float *)block->data)[i] = (float)i;
  assert_true(nbcore_buffer_exclusive(block));
  nbcore_buffer *row = nbcore_buffer_view(block, 16, 32), *inner = nbcore_buffer_view(row, 8, 8);
  assert_non_null(row);
  assert_non_null(inner);
  assert_false(nbcore_buffer_exclusive(row));
  assert_false(nbcore_buffer_exclusive(block)); /* the views hold it */
  assert_ptr_equal(inner->next, block);
  assert_true(((float *)row->data)[0] == 4 && ((float *)inner->data)[0] == 6);
  nbcore_buffer_release(c, block); /* the views keep the bytes */
  assert_true(((float *)inner->data)[1] == 7);
  nbcore_buffer_release(c, row);
  nbcore_buffer_release(c, inner); /* the last holder frees the block (ASan checks) */
}

/* Where data starts: a block of up to NBCORE_SMALL_DATA bytes in its header's cache line,
   32-byte aligned; a larger one on a line of its own, 64-byte aligned, whether fresh or
   from the pool. Scratch blocks of both kinds go back to their pools (ASan checks). */
static void test_data_alignment(void **state) {
  nb_ctx *c = *state;
  for (int round = 0; round < 2; round++) { /* fresh blocks, then pooled ones */
    nbcore_buffer *small = nbcore_buffer_new(c, 32), *large = nbcore_buffer_new(c, 4096);
    assert_non_null(small);
    assert_non_null(large);
    assert_int_equal((uintptr_t)small->data % NBCORE_ALIGN, NBCORE_SMALL_DATA_OFFSET);
    assert_ptr_equal((char *)small->data - NBCORE_SMALL_DATA_OFFSET, (char *)small);
    assert_int_equal((uintptr_t)large->data % NBCORE_ALIGN, 0);
    assert_ptr_equal((char *)large->data - NBCORE_ALIGN, (char *)large);
    nbcore_buffer_release(c, small);
    nbcore_buffer_release(c, large);
  }
  const size_t sizes[] = {1, NBCORE_SMALL_DATA, NBCORE_SMALL_DATA + 1, 1 << 20};
  for (int i = 0; i < 4; i++) {
    char *p = nbcore_scratch_alloc(c, sizes[i]);
    assert_non_null(p);
    memset(p, 1, sizes[i]);
    assert_int_equal((uintptr_t)p % (sizes[i] <= NBCORE_SMALL_DATA ? 32 : NBCORE_ALIGN), 0);
    nbcore_scratch_free(c, p);
  }
  nb_tensor *t = nb_tensor_from(c, NB_F32, 1, (const int64_t[]){1024}, NULL);
  assert_int_equal((uintptr_t)nbcore_tdata(t) % NBCORE_ALIGN, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_tensor_basics, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_tensor_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_sticky_status, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_output_too_large, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_errors_leave_no_handles, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_generic_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_scope_flat_memory, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_scope_nesting, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_views_refcount, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_cross_context, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_buffer_views, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_data_alignment, tu_setup, tu_teardown),
  };
  return cmocka_run_group_tests_name("core", tests, NULL, NULL);
}
