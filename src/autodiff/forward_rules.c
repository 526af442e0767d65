/* Forward-mode rules: a slot per op type (by the op's dense id) filled once from src/grad's
   tables, and nbad_jvp_op, which applies an op's rule or, without one, TF's fallback: the
   gradient rule g(u) = J^T u is linear in the cotangent u, so d<g(u), t>/du = J t for any
   u. Both modes share it: graph passes (forward.c) and the eager accumulator. */
#include "autodiff.h"

#include "../grad/grad.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct fwd_slot {
  nbg_fwd_kind kind;
  nbg_fwd_fn fn;
  int8_t a, b;
  bool set;
} fwd_slot;

static fwd_slot fwd_slots[NBOP_MAX_OPS];
static pthread_once_t fwd_once = PTHREAD_ONCE_INIT;

void nbad_register_fwd_table(const nbg_fwd_entry *table, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const nbop_def *def = nbop_lookup(table[i].op);
    if (def) fwd_slots[def->id] = (fwd_slot){table[i].kind, table[i].fn, (int8_t)table[i].a, (int8_t)table[i].b, true};
  }
}

static void register_forward(void) { nbg_register_builtin_forward(); }

bool nbad_has_forward_rule(const nbop_def *def) {
  nbad_grad_builtins_init();
  pthread_once(&fwd_once, register_forward);
  return fwd_slots[def->id].set;
}

/* The tangent of input i, or zeros of its shape when it has none. */
static nb_tensor *tangent_or_zeros(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *tin, int i) {
  return tin[i] ? tin[i] : nb_zeros_like(c, op->in[i]);
}

/* J = J^T: the gradient rule applied to the tangent. */
static nb_code symmetric(nb_ctx *c, const nb_fwd_op *op, nb_grad_fn fn, nb_tensor *const *tin, nb_tensor **tout) {
  if (!tin[0]) return NB_OK;
  nb_tensor *dxs[1 + NBAD_GRAD_GUARDS];
  nb_code code = nbad_grad_invoke(c, fn, op, tin, dxs);
  tout[0] = code ? NULL : dxs[0];
  return code;
}

/* f linear in its float inputs: J t = f(t), int/bool inputs kept. */
static nb_code linear(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *tin, nb_tensor **tout) {
  nb_tensor **args = malloc((size_t)op->nin * sizeof *args + 1);
  if (!args) return nbcore_fail(c, NB_NOMEM, "forward mode: out of memory");
  bool any = false;
  for (int i = 0; i < op->nin; i++) {
    bool flt = nbcore_is_float(op->in[i]->dtype);
    any |= flt && tin[i];
    args[i] = flt ? tangent_or_zeros(c, op, tin, i) : op->in[i];
  }
  nb_code code = any ? nbop_dispatch(c, op->def, args, op->nin, op->attr, tout, op->nout) : nb_status(c);
  free(args);
  return code;
}

/* f(a, b) bilinear: J t = f(ta, b) + f(a, tb), a term per tangent present. */
static nb_code bilinear(nb_ctx *c, const nb_fwd_op *op, int a, int b, nb_tensor *const *tin, nb_tensor **tout) {
  nb_tensor **args = malloc((size_t)op->nin * sizeof *args + 1), *term[2] = {NULL, NULL};
  if (!args) return nbcore_fail(c, NB_NOMEM, "forward mode: out of memory");
  const int which[2] = {a, b};
  nb_code code = NB_OK;
  for (int k = 0; k < 2 && !code; k++) {
    if (!tin[which[k]]) continue;
    for (int i = 0; i < op->nin; i++) args[i] = i == which[k] ? tin[i] : op->in[i];
    code = nbop_dispatch(c, op->def, args, op->nin, op->attr, &term[k], 1);
  }
  free(args);
  if (code) return code;
  tout[0] = term[0] && term[1] ? nb_add(c, term[0], term[1]) : term[0] ? term[0] : term[1];
  return nb_status(c);
}

/* The pieces of one transposition: u (ones, as TF's: a rule skips a cotangent it sees is
   zero) per float output, g = J^T u for each input with a tangent t, and d<g, t>/du. */
typedef struct transposed_parts {
  nb_tensor **dys, **dxs, **u, **g, **t, **tu;
  bool *needs;
  int nu, ng;
} transposed_parts;

/* u, watched by tape when eager (it must see u before the gradient rule reads it), then g. */
static nb_code transposed_vjp(nb_ctx *c, const nb_fwd_op *op, nb_grad_fn fn, nb_tensor *const *tin, nb_tape *tape,
                              transposed_parts *p) {
  for (int o = 0; o < op->nout; o++) {
    p->dys[o] = nbcore_is_float(op->out[o]->dtype) ? nb_ones_like(c, op->out[o]) : NULL;
    if (p->dys[o]) p->u[p->nu++] = p->dys[o];
    if (p->dys[o] && tape) nb_tape_watch(tape, p->dys[o]);
  }
  for (int i = 0; i < op->nin; i++) p->needs[i] = tin[i] != NULL;
  nb_fwd_op view = *op;
  view.needs_grad = p->needs;
  nb_code code = nb_status(c) ? nb_status(c) : nbad_grad_invoke(c, fn, &view, p->dys, p->dxs);
  for (int i = 0; i < op->nin && !code; i++)
    if (tin[i] && p->dxs[i]) {
      p->g[p->ng] = nb_densify(c, p->dxs[i]);
      p->t[p->ng++] = tin[i];
    }
  return code ? code : nb_status(c);
}

static nb_code transposed_run(nb_ctx *c, const nb_fwd_op *op, nb_grad_fn fn, nb_tensor *const *tin, nb_tensor **tout,
                              transposed_parts *p) {
  nb_tape *tape = c->graph ? NULL : nb_tape_begin(c, 0);
  nb_code code = c->graph || tape ? transposed_vjp(c, op, fn, tin, tape, p) : nb_status(c);
  if (!code && p->ng > 0)
    code = tape ? nb_tape_gradient(tape, p->g, p->ng, p->u, p->nu, p->t, p->tu)
                : nb_gradients(c, p->g, p->ng, p->u, p->nu, &(nb_grad_opts){.grad_ys = p->t, .name = "jvp"}, p->tu);
  if (tape) nb_tape_end(tape);
  for (int o = 0, k = 0; o < op->nout && !code && p->ng > 0; o++)
    if (p->dys[o]) tout[o] = p->tu[k++];
  return code;
}

/* TF's fallback for an op without a forward rule: J t = d<J^T u, t>/du. */
static nb_code transposed(nb_ctx *c, const nb_fwd_op *op, nb_grad_fn fn, nb_tensor *const *tin, nb_tensor **tout) {
  size_t n = (size_t)(op->nout + op->nin + NBAD_GRAD_GUARDS + 2 * op->nout + 2 * op->nin);
  transposed_parts p = {.dys = calloc(n, sizeof *p.dys), .needs = malloc((size_t)op->nin + 1)};
  if (!p.dys || !p.needs) {
    free(p.dys);
    free(p.needs);
    return nbcore_fail(c, NB_NOMEM, "forward mode: out of memory");
  }
  p.dxs = p.dys + op->nout;
  p.u = p.dxs + op->nin + NBAD_GRAD_GUARDS;
  p.tu = p.u + op->nout;
  p.g = p.tu + op->nout;
  p.t = p.g + op->nin;
  nb_code code = transposed_run(c, op, fn, tin, tout, &p);
  free(p.dys);
  free(p.needs);
  return code;
}

/* Drops tangents of int/bool outputs and checks the rest against their outputs. */
static nb_code check_tangents(nb_ctx *c, const nb_fwd_op *op, nb_tensor **tout) {
  for (int o = 0; o < op->nout; o++) {
    if (!tout[o]) continue;
    if (!nbcore_is_float(op->out[o]->dtype)) {
      tout[o] = NULL;
      continue;
    }
    tout[o] = nb_densify(c, tout[o]);
    if (tout[o] && (tout[o]->dtype != op->out[o]->dtype || !nbop_shapes_compatible(tout[o], op->out[o])))
      return nbcore_fail(c, NB_INTERNAL,
                         "forward mode: the tangent of output %d of '%s' (op type: %s), %s %s, does not fit the output",
                         o, op->name, op->def->name, nb_dtype_name(tout[o]->dtype), nbop_tstr(tout[o]));
  }
  return nb_status(c);
}

/* Whether the values rule s reads are there: always in a graph and for concrete eager
   tensors, but a tape's records keep only what the gradient rule reads (and int/bool
   inputs), which is all a symmetric rule and the transposition read. A linear rule reads
   the int/bool inputs; a bilinear one inputs a and b too; any other rule, every input and
   output. */
static bool rule_values_kept(const nb_ctx *c, const nb_fwd_op *op, const fwd_slot *s) {
  if (c->graph || s->kind == NBG_FWD_SYMMETRIC) return true;
  for (int i = 0; i < op->nin; i++) {
    bool read = !nbcore_is_float(op->in[i]->dtype) || s->kind == NBG_FWD_RULE ||
                (s->kind == NBG_FWD_BILINEAR && (i == s->a || i == s->b));
    if (read && !op->in[i]->buf && !nb_is_indexed_slices(op->in[i])) return false;
  }
  for (int o = 0; o < op->nout && s->kind == NBG_FWD_RULE; o++)
    if (!op->out[o]->buf) return false;
  return true;
}

nb_code nbad_jvp_op(nb_ctx *c, const nb_fwd_op *op, const char *override_name, nb_tensor *const *tin,
                    nb_tensor **tout) {
  for (int o = 0; o < op->nout; o++) tout[o] = NULL;
  bool any = false;
  for (int i = 0; i < op->nin; i++) any |= tin[i] != NULL;
  if (!any) return NB_OK;
  bool has_rule = nbad_has_forward_rule(op->def); /* registers the gradients too */
  nb_grad_fn fn;
  nbad_grad_kind kind = nbad_grad_lookup(op->def, override_name, &fn);
  if (kind == NBAD_GRAD_STOP) return NB_OK; /* not differentiable: no tangent, as no gradient */
  /* an overridden gradient defines the op's derivative: its transposition, not the op's rule */
  const fwd_slot *s = !override_name && has_rule ? &fwd_slots[op->def->id] : NULL;
  if (s && s->kind == NBG_FWD_SYMMETRIC && kind != NBAD_GRAD_FN) s = NULL; /* it applies the gradient rule */
  if (s && kind == NBAD_GRAD_FN && !rule_values_kept(c, op, s)) s = NULL;  /* a tape's record: transpose */
  if (!s && kind == NBAD_GRAD_NONE)
    return nbcore_fail(c, NB_NO_GRADIENT, "No gradient defined for operation '%s' (op type: %s)", op->name,
                       op->def->name);
  nb_code code;
  if (!s)
    code = transposed(c, op, fn, tin, tout);
  else if (s->kind == NBG_FWD_SYMMETRIC)
    code = symmetric(c, op, fn, tin, tout);
  else if (s->kind == NBG_FWD_LINEAR)
    code = linear(c, op, tin, tout);
  else if (s->kind == NBG_FWD_BILINEAR)
    code = bilinear(c, op, s->a, s->b, tin, tout);
  else
    code = s->fn(c, op, tin, tout);
  if (!code && nb_status(c) == NB_OK) return check_tangents(c, op, tout);
  if (!code) code = nb_status(c);
  return code;
}
