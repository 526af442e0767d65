/* While, If and function calls as TF's functional ops, their function graphs as
   FunctionDefs of the GraphDef's library. */
#include "graphdef_write.h"

#include <string.h>

bool nbio_write_function_node(nbio_writer *w, nbio_body *b, int32_t id) {
  const char *type = b->g->nodes[id].def->name;
  if (strcmp(type, "While") && strcmp(type, "If") && strcmp(type, "StatefulPartitionedCall")) return false;
  nbio_fail(w, NB_UNIMPLEMENTED, "node '%s': %s export comes next", b->g->nodes[id].name, type);
  return true;
}
