/* Optimizers (Keras's SGD with momentum, Adam, AdamW, RMSprop), learning-rate schedules and
   clipping by global norm. An optimizer keeps a step counter (the int64 variable Keras
   calls iterations) and, per variable, slot variables made on its first update. Eager
   updates call the fused kernels of src/ops/training.c directly, with the step's
   hyperparameters computed here in double; graph updates add the ResourceApply* nodes,
   with the hyperparameters computed from the counter's ReadVariableOp by ops (as Keras
   does), so schedules advance across runs. IndexedSlices gradients take the sparse
   updates (the kernels' nbop_sparse_apply_update eagerly; ResourceScatterSub and the
   ResourceSparseApply* nodes in graphs), which never densify the gradient. */
#include "../ops/training.h"
#include "../runtime/runtime.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NBTRAIN_PI 3.14159265358979323846

typedef struct slot_set {
  uint64_t var_id;
  nb_variable *slot[NBOP_APPLY_MAX_VARS - 1];
} slot_set;

struct nb_optimizer {
  const nbcore_optim_state *state; /* first: what checkpoints read of it (src/core/variable.h) */
  nbop_apply_kind kind;
  nbop_hyper h; /* lr unused: the schedule gives it */
  nb_lr_schedule lr;
  nb_variable *iterations; /* int64 scalar, made on the first update */
  slot_set *slots;
  int32_t nslots, slots_cap;
  int32_t next; /* where the next lookup starts: updates come in the same order each step */
};

/* Slot names per kind, in the order the kernels take them after the variable. */
static const char *const slot_names[][NBOP_APPLY_MAX_VARS - 1] = {
    [NBOP_APPLY_SGD] = {NULL},
    [NBOP_APPLY_MOMENTUM] = {"momentum"},
    [NBOP_APPLY_ADAM] = {"m", "v"},
    [NBOP_APPLY_ADAMW] = {"m", "v"},
    [NBOP_APPLY_RMSPROP] = {"rms", "momentum"},
    [NBOP_APPLY_CENTERED_RMSPROP] = {"mg", "rms", "momentum"},
};

static const nbcore_optim_state optim_state;

static nb_optimizer *optimizer_new(nbop_apply_kind kind, double lr, nbop_hyper h) {
  nb_optimizer *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->state = &optim_state;
  o->kind = kind;
  o->h = h;
  o->lr = (nb_lr_schedule){NB_LR_CONSTANT, lr, 1, 1, 0};
  return o;
}

nb_optimizer *nb_sgd_new(double learning_rate) { return optimizer_new(NBOP_APPLY_SGD, learning_rate, (nbop_hyper){0}); }

nb_optimizer *nb_momentum_new(double learning_rate, double momentum, bool nesterov) {
  return optimizer_new(NBOP_APPLY_MOMENTUM, learning_rate, (nbop_hyper){.momentum = momentum, .nesterov = nesterov});
}

nb_optimizer *nb_adam_new(double learning_rate, double beta1, double beta2, double epsilon) {
  return optimizer_new(NBOP_APPLY_ADAM, learning_rate,
                       (nbop_hyper){.beta1 = beta1, .beta2 = beta2, .epsilon = epsilon});
}

nb_optimizer *nb_adamw_new(double learning_rate, double beta1, double beta2, double epsilon, double weight_decay) {
  return optimizer_new(NBOP_APPLY_ADAMW, learning_rate,
                       (nbop_hyper){.beta1 = beta1, .beta2 = beta2, .epsilon = epsilon, .weight_decay = weight_decay});
}

nb_optimizer *nb_rmsprop_new(double learning_rate, double rho, double momentum, double epsilon, bool centered) {
  return optimizer_new(centered ? NBOP_APPLY_CENTERED_RMSPROP : NBOP_APPLY_RMSPROP, learning_rate,
                       (nbop_hyper){.rho = rho, .momentum = momentum, .epsilon = epsilon});
}

void nb_optimizer_free(nb_optimizer *o) {
  if (!o) return;
  for (int32_t i = 0; i < o->nslots; i++)
    for (int s = 0; s < NBOP_APPLY_MAX_VARS - 1; s++) nb_variable_free(o->slots[i].slot[s]);
  free(o->slots);
  nb_variable_free(o->iterations);
  free(o);
}

int64_t nb_optimizer_iterations(const nb_optimizer *o) {
  return o && o->iterations ? *(const int64_t *)nb_variable_data(o->iterations) : 0;
}

/* ---- schedules ----------------------------------------------------------------------------- */

nb_lr_schedule nb_step_decay(double initial, int64_t decay_steps, double decay_rate) {
  return (nb_lr_schedule){NB_LR_STEP_DECAY, initial, decay_steps, decay_rate, 0};
}

nb_lr_schedule nb_cosine_decay(double initial, int64_t decay_steps, double alpha) {
  return (nb_lr_schedule){NB_LR_COSINE_DECAY, initial, decay_steps, 0, alpha};
}

/* Each operation in the order the graph version (schedule_tensor) performs it, so both
   modes round alike. A decay over decay_steps <= 0 steps has no value (and step decay's
   integer division by it would trap): NaN, as for NULL. */
double nb_lr_schedule_value(const nb_lr_schedule *s, int64_t step) {
  if (!s || (s->kind != NB_LR_CONSTANT && s->decay_steps <= 0)) return NAN;
  switch (s->kind) {
    case NB_LR_STEP_DECAY: return s->initial * pow(s->decay_rate, (double)(step / s->decay_steps));
    case NB_LR_COSINE_DECAY: {
      double done = (double)(step < s->decay_steps ? step : s->decay_steps) / (double)s->decay_steps;
      double cosine = 0.5 * (1 + cos(NBTRAIN_PI * done));
      return s->initial * ((1 - s->alpha) * cosine + s->alpha);
    }
    default: return s->initial;
  }
}

nb_code nb_optimizer_set_schedule(nb_optimizer *o, nb_lr_schedule s) {
  if (!o || (s.kind != NB_LR_CONSTANT && s.decay_steps <= 0)) return NB_INVALID;
  o->lr = s;
  return NB_OK;
}

/* The schedule at the int64 scalar step, by ops in dtype t. */
static nb_tensor *schedule_tensor(nb_ctx *c, const nb_lr_schedule *s, nb_tensor *step, nb_dtype t) {
  switch (s->kind) {
    case NB_LR_STEP_DECAY: {
      nb_tensor *stairs = nb_cast(c, nb_real_div(c, step, nb_scalar(c, NB_I64, (double)s->decay_steps)), t);
      return nb_mul(c, nb_scalar(c, t, s->initial), nb_pow(c, nb_scalar(c, t, s->decay_rate), stairs));
    }
    case NB_LR_COSINE_DECAY: {
      nb_tensor *steps = nb_scalar(c, t, (double)s->decay_steps);
      nb_tensor *done = nb_real_div(c, nb_minimum(c, nb_cast(c, step, t), steps), steps);
      nb_tensor *cosine =
          nb_mul(c, nb_scalar(c, t, 0.5),
                 nb_add(c, nb_scalar(c, t, 1), nb_cos(c, nb_mul(c, nb_scalar(c, t, NBTRAIN_PI), done))));
      nb_tensor *decayed = nb_add(c, nb_mul(c, nb_scalar(c, t, 1 - s->alpha), cosine), nb_scalar(c, t, s->alpha));
      return nb_mul(c, nb_scalar(c, t, s->initial), decayed);
    }
    default: return nb_scalar(c, t, s->initial);
  }
}

/* ---- slots ------------------------------------------------------------------------------------ */

/* A zero-filled non-trainable variable shaped like like, named "<like>/<suffix>". */
static nb_variable *zeros_variable(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape, const char *like,
                                   const char *suffix) {
  size_t bytes = (size_t)nbcore_shape_size(rank, shape) * nb_dtype_size(t);
  size_t len = strlen(like) + strlen(suffix) + 2;
  char *name = malloc(len);
  nbcore_buffer *b = nbcore_buffer_new(c, bytes);
  nb_variable *v = NULL;
  if (name && b) {
    memset(b->data, 0, bytes);
    strcpy(name, like);
    strcat(strcat(name, "/"), suffix);
    v = nbcore_variable_make(t, rank, shape, b, false, name);
    b = NULL; /* taken over, even on failure */
  }
  nbcore_buffer_release(c, b);
  free(name);
  if (!v) nbcore_fail(c, NB_NOMEM, "out of memory making the slot '%s' of variable '%s'", suffix, like);
  return v;
}

static slot_set *find_slots(nb_optimizer *o, uint64_t var_id) {
  for (int32_t k = 0; k < o->nslots; k++) {
    int32_t i = (o->next + k) % o->nslots;
    if (o->slots[i].var_id == var_id) {
      o->next = (i + 1) % o->nslots;
      return &o->slots[i];
    }
  }
  return NULL;
}

/* var's slots, made (zeros) on its first update; NULL on error (c's status set). */
static slot_set *slots_of(nb_optimizer *o, nb_ctx *c, nb_variable *var) {
  slot_set *s = find_slots(o, var->id);
  if (s) return s;
  if (!nbcore_grow_array((void **)&o->slots, &o->slots_cap, o->nslots + 1, sizeof *o->slots)) {
    nbcore_fail(c, NB_NOMEM, "out of memory making the slots of variable '%s'", var->name);
    return NULL;
  }
  s = &o->slots[o->nslots];
  *s = (slot_set){var->id, {NULL}};
  for (int i = 0; i < nbop_apply_num_vars(o->kind) - 1; i++)
    if (!(s->slot[i] = zeros_variable(c, var->dtype, var->rank, var->shape, var->name, slot_names[o->kind][i]))) {
      for (int j = 0; j < i; j++) nb_variable_free(s->slot[j]);
      return NULL;
    }
  o->nslots++;
  return s;
}

nb_variable *nb_optimizer_slot(const nb_optimizer *o, const nb_variable *var, const char *slot) {
  if (!o || !var || !slot) return NULL;
  for (int32_t i = 0; i < o->nslots; i++) {
    if (o->slots[i].var_id != var->id) continue;
    for (int k = 0; k < nbop_apply_num_vars(o->kind) - 1; k++)
      if (strcmp(slot_names[o->kind][k], slot) == 0) return o->slots[i].slot[k];
  }
  return NULL;
}

/* ---- applying -------------------------------------------------------------------------------- */

static nb_code check_apply(nb_ctx *c, nb_tensor *const *grads, nb_variable *const *vars, int n) {
  if (n < 0 || (n > 0 && (!grads || !vars)))
    return nbcore_fail(c, NB_INVALID, "nb_optimizer_apply: grads or vars is NULL, or n is negative");
  for (int i = 0; i < n; i++) {
    const nb_variable *v = vars[i];
    const nb_tensor *g = grads[i];
    if (!v || v->freed)
      return nbcore_fail(c, NB_INVALID, "nb_optimizer_apply: vars[%d] is %s", i, v ? "freed" : "NULL");
    if (!g) continue;
    if (!nbcore_is_float(v->dtype))
      return nbcore_fail(c, NB_DTYPE,
                         "nb_optimizer_apply: variable '%s' has dtype %s; optimizers update float32 and "
                         "float64 variables",
                         v->name, nb_dtype_name(v->dtype));
    bool sparse = nb_is_indexed_slices(g);
    if (!c->graph && !(sparse ? nb_indexed_slices_values(g) : g)->buf)
      return nbcore_fail(c, NB_INVALID,
                         "nb_optimizer_apply: gradient %d (for variable '%s') is a graph tensor; eager "
                         "updates need values",
                         i, v->name);
    if (!nbcore_variable_accepts(v, g))
      return nbcore_fail(c, g->dtype != v->dtype ? NB_DTYPE : NB_SHAPE,
                         "nb_optimizer_apply: gradient %d has %sshape %s and dtype %s; variable '%s' has shape %s and "
                         "dtype %s",
                         i, sparse ? "IndexedSlices of dense " : "", g->rank < 0 ? "<unknown>" : nbop_tstr(g),
                         nb_dtype_name(g->dtype), v->name, nbop_sstr(v->rank, v->shape), nb_dtype_name(v->dtype));
  }
  return NB_OK;
}

static nb_variable *optim_step_variable(nb_optimizer *o, nb_ctx *c) {
  if (!o->iterations) {
    nbcore_buffer *b = nbcore_buffer_new(c, sizeof(int64_t));
    if (b) *(int64_t *)b->data = 0;
    if (!b || !(o->iterations = nbcore_variable_make(NB_I64, 0, NULL, b, false, "iterations")))
      nbcore_fail(c, NB_NOMEM, "out of memory making an optimizer's step counter");
  }
  return o->iterations;
}

static const char *const *optim_slot_names(const nb_optimizer *o, int *n) {
  *n = nbop_apply_num_vars(o->kind) - 1;
  return slot_names[o->kind];
}

static nb_variable *const *optim_slots(nb_optimizer *o, nb_ctx *c, nb_variable *var) {
  slot_set *s = slots_of(o, c, var);
  return s ? s->slot : NULL;
}

static const nbcore_optim_state optim_state = {optim_slot_names, nb_optimizer_slot, nb_optimizer_iterations,
                                               optim_step_variable, optim_slots};

/* The step counter and every updated variable's slots exist. */
static nb_code prepare(nb_optimizer *o, nb_ctx *c, nb_tensor *const *grads, nb_variable *const *vars, int n) {
  if (!optim_step_variable(o, c)) return c->status;
  for (int i = 0; i < n; i++)
    if (grads[i] && !slots_of(o, c, vars[i])) return c->status;
  return NB_OK;
}

/* The variable and its slots, in the kernels' order. */
static int update_vars(nb_optimizer *o, nb_variable *var, nb_variable **uses) {
  const slot_set *s = find_slots(o, var->id);
  int n = nbop_apply_num_vars(o->kind);
  uses[0] = var;
  for (int i = 1; i < n; i++) uses[i] = s->slot[i - 1];
  return n;
}

static nb_code apply_eager(nb_optimizer *o, nb_ctx *c, nb_tensor *const *grads, nb_variable *const *vars, int n) {
  int64_t step = nb_optimizer_iterations(o);
  nbop_hyper h = o->h;
  h.lr = nb_lr_schedule_value(&o->lr, step);
  h.beta1_power = pow(h.beta1, (double)step + 1);
  h.beta2_power = pow(h.beta2, (double)step + 1);
  for (int i = 0; i < n; i++) {
    if (!grads[i]) continue;
    nb_variable *uses[NBOP_APPLY_MAX_VARS];
    update_vars(o, vars[i], uses);
    nb_tensor *g = grads[i];
    nb_code code = nb_is_indexed_slices(g) ? nbop_sparse_apply_update(c, o->kind, uses, nb_indexed_slices_values(g),
                                                                      nb_indexed_slices_indices(g), &h, c->threads)
                                           : nbop_apply_update(c, o->kind, uses, nbcore_tdata(g), &h, c->threads);
    if (code) return code;
  }
  int64_t *counter = nbcore_variable_writable(c, o->iterations, true);
  if (!counter) return c->status;
  ++*counter;
  return NB_OK;
}

/* The inputs of a graph update for one dtype, computed once per apply: TF's input order
   with the gradient left NULL. */
typedef struct graph_hyper {
  nb_tensor *in[9]; /* room for a sparse update's indices */
  int nin, grad;
} graph_hyper;

static void hyper_tensors(nb_optimizer *o, nb_ctx *c, nb_tensor *step, nb_dtype t, graph_hyper *gh) {
  const nbop_hyper *h = &o->h;
  nb_tensor *lr = schedule_tensor(c, &o->lr, step, t);
#define S(v) nb_scalar(c, t, v)
  switch (o->kind) {
    case NBOP_APPLY_SGD: *gh = (graph_hyper){{lr, NULL}, 2, 1}; break;
    case NBOP_APPLY_MOMENTUM: *gh = (graph_hyper){{lr, NULL, S(h->momentum)}, 3, 1}; break;
    case NBOP_APPLY_ADAM:
    case NBOP_APPLY_ADAMW: { /* Keras: beta^(iterations + 1) */
      nb_tensor *local = nb_add(c, nb_cast(c, step, t), S(1));
      nb_tensor *b1p = nb_pow(c, S(h->beta1), local), *b2p = nb_pow(c, S(h->beta2), local);
      *gh = (graph_hyper){{b1p, b2p, lr, S(h->beta1), S(h->beta2), S(h->epsilon), NULL, S(h->weight_decay)},
                          o->kind == NBOP_APPLY_ADAMW ? 8 : 7,
                          6};
      break;
    }
    default: *gh = (graph_hyper){{lr, S(h->rho), S(h->momentum), S(h->epsilon), NULL}, 5, 4}; break;
  }
#undef S
}

static const char *const op_types[] = {
    [NBOP_APPLY_SGD] = "ResourceApplyGradientDescent", [NBOP_APPLY_MOMENTUM] = "ResourceApplyMomentum",
    [NBOP_APPLY_ADAM] = "ResourceApplyAdam",           [NBOP_APPLY_ADAMW] = "ResourceApplyAdamW",
    [NBOP_APPLY_RMSPROP] = "ResourceApplyRMSProp",     [NBOP_APPLY_CENTERED_RMSPROP] = "ResourceApplyCenteredRMSProp",
};

/* For IndexedSlices gradients; SGD's is ResourceScatterSub of lr values, as Keras's. */
static const char *const sparse_op_types[] = {
    [NBOP_APPLY_SGD] = "ResourceScatterSub",
    [NBOP_APPLY_MOMENTUM] = "ResourceSparseApplyMomentum",
    [NBOP_APPLY_ADAM] = "ResourceSparseApplyAdam",
    [NBOP_APPLY_ADAMW] = "ResourceSparseApplyAdamW",
    [NBOP_APPLY_RMSPROP] = "ResourceSparseApplyRMSProp",
    [NBOP_APPLY_CENTERED_RMSPROP] = "ResourceSparseApplyCenteredRMSProp",
};

/* The update node of var from gradient g, the hyperparameters in gh. */
static nb_tensor *update_node(nb_optimizer *o, nb_ctx *c, graph_hyper gh, nb_tensor *g, nb_variable *var) {
  nb_variable *uses[NBOP_APPLY_MAX_VARS];
  int64_t bits[NBOP_APPLY_MAX_VARS];
  int nuses = update_vars(o, var, uses);
  for (int k = 0; k < nuses; k++) bits[k] = nbcore_variable_bits(uses[k]);
  if (!nb_is_indexed_slices(g)) {
    gh.in[gh.grad] = g;
    /* _variables, use_locking, and use_nesterov where the op has it (Momentum) */
    nbop_attrval attrs[NBOP_MAX_ATTRS] = {{.ints = bits, .n = nuses}, {.b = false}, {.b = o->h.nesterov}};
    return nbrt_variable_update(c, nbop_lookup(op_types[o->kind]), uses, nuses, gh.in, gh.nin, attrs, "apply");
  }
  nb_tensor *values = nb_indexed_slices_values(g), *indices = nb_indexed_slices_indices(g);
  if (o->kind == NBOP_APPLY_SGD) { /* dtype, _variable */
    nbop_attrval attrs[NBOP_MAX_ATTRS] = {{.type = var->dtype}, {.i = bits[0]}};
    nb_tensor *in[2] = {indices, nb_mul(c, values, gh.in[0])};
    return nbrt_variable_update(c, nbop_lookup(sparse_op_types[o->kind]), uses, 1, in, 2, attrs, "apply");
  }
  memmove(gh.in + gh.grad + 2, gh.in + gh.grad + 1, (size_t)(gh.nin - gh.grad - 1) * sizeof *gh.in);
  gh.in[gh.grad] = values;
  gh.in[gh.grad + 1] = indices;
  nbop_attrval attrs[NBOP_MAX_ATTRS] = {{.ints = bits, .n = nuses}, {.b = false}, {.b = o->h.nesterov}};
  return nbrt_variable_update(c, nbop_lookup(sparse_op_types[o->kind]), uses, nuses, gh.in, gh.nin + 1, attrs, "apply");
}

static nb_tensor *apply_graph(nb_optimizer *o, nb_ctx *c, nb_tensor *const *grads, nb_variable *const *vars, int n) {
  nb_tensor *step = nb_variable_read(c, o->iterations);
  graph_hyper per_dtype[2];
  bool made[2] = {false, false};
  nb_tensor **updates = calloc((size_t)n + 1, sizeof *updates);
  if (!updates) {
    nbcore_fail(c, NB_NOMEM, "nb_optimizer_apply: out of memory");
    return NULL;
  }
  int nupdates = 0;
  for (int i = 0; i < n && nbop_live(c); i++) {
    if (!grads[i]) continue;
    int d = vars[i]->dtype == NB_F64;
    if (!made[d]) hyper_tensors(o, c, step, vars[i]->dtype, &per_dtype[d]);
    made[d] = true;
    updates[nupdates++] = update_node(o, c, per_dtype[d], grads[i], vars[i]);
  }
  nb_tensor *inc = nb_variable_assign_add(c, o->iterations, nb_scalar(c, NB_I64, 1));
  for (int i = 0; i < nupdates && inc; i++)
    if (nb_add_control_input(inc, updates[i]) != NB_OK)
      inc = NULL, nbcore_fail(c, NB_NOMEM, "nb_optimizer_apply: out of memory");
  free(updates);
  return inc;
}

nb_code nb_optimizer_apply(nb_optimizer *o, nb_ctx *c, nb_tensor *const *grads, nb_variable *const *vars, int n,
                           nb_tensor **train_op) {
  if (train_op) *train_op = NULL;
  if (!c) return NB_INVALID;
  if (!nbop_live(c)) return c->status;
  if (!o) return nbcore_fail(c, NB_INVALID, "nb_optimizer_apply: NULL optimizer");
  nb_code code = check_apply(c, grads, vars, n);
  if (!code) code = prepare(o, c, grads, vars, n);
  if (code) return code;
  if (!c->graph) return apply_eager(o, c, grads, vars, n);
  nb_tensor *op = apply_graph(o, c, grads, vars, n);
  if (train_op) *train_op = op;
  return nb_status(c);
}

/* ---- clipping ---------------------------------------------------------------------------------- */

/* IndexedSlices count by their values, as TF's global_norm (repeated indices are not
   summed first), and stay sparse when scaled. */
static nb_tensor *dense_part(nb_tensor *g) { return nb_is_indexed_slices(g) ? nb_indexed_slices_values(g) : g; }

static nb_tensor *scaled(nb_ctx *c, nb_tensor *g, nb_tensor *scale) {
  if (!nb_is_indexed_slices(g)) return nb_mul(c, g, scale);
  return nb_indexed_slices(c, nb_mul(c, nb_indexed_slices_values(g), scale), nb_indexed_slices_indices(g), nb_shape(g),
                           nb_rank(g));
}

nb_code nb_clip_by_global_norm(nb_ctx *c, nb_tensor *const *grads, int n, double clip_norm, nb_tensor **out,
                               nb_tensor **global_norm) {
  if (!c) return NB_INVALID;
  for (int i = 0; out && i < n; i++) out[i] = NULL;
  if (global_norm) *global_norm = NULL;
  if (!nbop_live(c)) return c->status;
  if (n < 0 || (n > 0 && (!grads || !out)))
    return nbcore_fail(c, NB_INVALID, "nb_clip_by_global_norm: grads or out is NULL, or n is negative");
  if (!(clip_norm > 0))
    return nbcore_fail(c, NB_INVALID, "nb_clip_by_global_norm: clip_norm %g must be > 0", clip_norm);
  nb_tensor *small[16], **squares = n <= 16 ? small : malloc((size_t)n * sizeof *squares);
  if (!squares) return nbcore_fail(c, NB_NOMEM, "nb_clip_by_global_norm: out of memory");
  int m = 0, first = -1;
  for (int i = 0; i < n && nbop_live(c); i++) {
    if (!grads[i]) continue;
    if (first < 0) first = i;
    if (!nbcore_is_float(grads[i]->dtype) || grads[i]->dtype != grads[first]->dtype)
      nbcore_fail(c, NB_DTYPE, "nb_clip_by_global_norm: gradient %d has dtype %s; expected %s like gradient %d", i,
                  nb_dtype_name(grads[i]->dtype),
                  nbcore_is_float(grads[first]->dtype) ? nb_dtype_name(grads[first]->dtype) : "a float dtype", first);
    else
      squares[m++] = nb_sum(c, nb_square(c, dense_part(grads[i])), NULL, 0, false);
  }
  nb_dtype t = first >= 0 ? grads[first]->dtype : NB_F32;
  nb_tensor *norm = m ? nb_sqrt(c, nb_add_n(c, squares, m)) : nb_scalar(c, t, 0);
  if (squares != small) free(squares);
  /* norm - norm is NaN exactly when norm is inf or NaN: then every output is NaN, as TF */
  nb_tensor *use = nb_add(c, norm, nb_sub(c, norm, norm));
  nb_tensor *scale =
      nb_mul(c, nb_scalar(c, t, clip_norm), nb_minimum(c, nb_reciprocal(c, use), nb_scalar(c, t, 1 / clip_norm)));
  for (int i = 0; i < n && nbop_live(c); i++) out[i] = grads[i] ? scaled(c, grads[i], scale) : NULL;
  if (!nbop_live(c)) {
    for (int i = 0; i < n; i++) out[i] = NULL;
    return c->status;
  }
  if (global_norm) *global_norm = norm;
  return NB_OK;
}
