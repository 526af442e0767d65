/* GraphDef import (graphdef.c): TF's graphs and their function libraries into nabla graphs. */
#ifndef NBIO_GRAPHDEF_H
#define NBIO_GRAPHDEF_H

#include "../func/func.h"
#include "graph.pb-c.h"

/* Adds gd's nodes (and the functions they call) to c's graph, a graph context's: all or
   nothing, the graph unchanged on an error (set on c, the message starting with who, the
   file's name). A SavedModel reader calls it on the GraphDef of its MetaGraphDef. */
nb_code nbio_graphdef_import(nb_ctx *c, const Nbpb__GraphDef *gd, const char *who);

#endif
