/* TensorFlow's output arg names, for references to node outputs inside FunctionDefs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphdef.h"

typedef struct tf_op_outputs {
  const char *op;
  const char *args; /* "name", "name*number_attr" or "name+type_list_attr", joined by ',' */
} tf_op_outputs;

static const tf_op_outputs op_outputs[] = {
#include "tf_op_outputs.inc"
};

static int compare_op(const void *key, const void *entry) {
  return strcmp((const char *)key, ((const tf_op_outputs *)entry)->op);
}

const Nbpb__AttrValue *nbio_node_attr(const Nbpb__NodeDef *node, const char *key) {
  for (size_t i = 0; i < node->n_attr; i++)
    if (strcmp(node->attr[i]->key, key) == 0) return node->attr[i]->value;
  return NULL;
}

/* How many tensors an output arg holds: 1, or its number attr's value, or the length of
   its type list attr (-1 when the node lacks the attr). */
static long arg_count(const Nbpb__NodeDef *node, char kind, const char *attr, size_t attr_len) {
  if (kind == 0) return 1;
  char key[128];
  if (attr_len >= sizeof key) return -1;
  memcpy(key, attr, attr_len);
  key[attr_len] = '\0';
  const Nbpb__AttrValue *v = nbio_node_attr(node, key);
  if (!v) return -1;
  if (kind == '*') return v->value_case == NBPB__ATTR_VALUE__VALUE_I ? (long)v->i : -1;
  return v->value_case == NBPB__ATTR_VALUE__VALUE_LIST ? (long)v->list->n_type : -1;
}

bool nbio_tf_output_ref(const Nbpb__NodeDef *node, int port, char *buf, size_t cap) {
  const tf_op_outputs *e =
      bsearch(node->op, op_outputs, sizeof op_outputs / sizeof op_outputs[0], sizeof op_outputs[0], compare_op);
  if (!e) {
    int n = snprintf(buf, cap, "output:%d", port);
    return n >= 0 && (size_t)n < cap;
  }
  long before = 0; /* outputs in the args before this one */
  for (const char *a = e->args; *a;) {
    size_t len = strcspn(a, ",");
    size_t name_len = strcspn(a, "*+,");
    char kind = name_len < len ? a[name_len] : 0;
    long count = arg_count(node, kind, a + name_len + 1, len - name_len - (kind ? 1 : 0));
    if (count < 0) return false;
    if (port < before + count) {
      int n = snprintf(buf, cap, "%.*s:%ld", (int)name_len, a, port - before);
      return n >= 0 && (size_t)n < cap;
    }
    before += count;
    a += len + (a[len] == ',');
  }
  return false;
}
