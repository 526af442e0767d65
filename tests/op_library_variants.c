/* Broken op libraries for test_load_op_library, one per compile definition: each must be
   refused with its own error, and none may register anything. */
#include <nabla.h>

static nb_code kernel(nb_op_ctx *k) {
  (void)k;
  return NB_OK;
}

/* An op this library would register if its init ran. */
static nb_code register_never(const char *name) {
  static const nb_op_arg x = {"x", NB_F64, NULL, NULL}, y = {"y", NB_F64, NULL, NULL};
  nb_op_spec spec = {name, &x, 1, &y, 1, NULL, 0, NULL, kernel, false};
  return nb_register_op(&spec);
}

#if defined(NB_VARIANT_NO_ABI) /* a shared object that is no op library */
NB_OP_LIBRARY_EXPORT nb_code nabla_op_library_init(int host_abi) {
  (void)host_abi;
  return register_never("NoAbiOp");
}
#elif defined(NB_VARIANT_NO_INIT)    /* its init misnamed */
NB_OP_LIBRARY_EXPORT int nabla_op_library_abi(void) { return NB_ABI_VERSION; }
NB_OP_LIBRARY_EXPORT nb_code nabla_op_library_initialize(int host_abi);
NB_OP_LIBRARY_EXPORT nb_code nabla_op_library_initialize(int host_abi) {
  (void)host_abi;
  return register_never("MisnamedInitOp");
}
#elif defined(NB_VARIANT_OLD_ABI)    /* built against another nabla.h */
NB_OP_LIBRARY_EXPORT int nabla_op_library_abi(void) { return NB_ABI_VERSION + 1; }
NB_OP_LIBRARY_EXPORT nb_code nabla_op_library_init(int host_abi) {
  (void)host_abi;
  return register_never("OldAbiOp");
}
#elif defined(NB_VARIANT_INIT_FAILS) /* registers one op, then a second that clashes with a built-in */
NB_OP_LIBRARY_EXPORT int nabla_op_library_abi(void) { return NB_ABI_VERSION; }
NB_OP_LIBRARY_EXPORT nb_code nabla_op_library_init(int host_abi) {
  (void)host_abi;
  nb_code code = register_never("HalfLoadedOp");
  return code ? code : register_never("MatMul");
}
#else
#error "define one NB_VARIANT_*"
#endif
