/* The optimizer's pipeline and its public entries: nb_graph_optimize, and the sessions
   that run it when they plan (nb_session_new, nb_session_new_with_opts). */
#include "fuse.h"
#include "opt.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct nbopt_pass {
  unsigned bit; /* NB_PASS_* */
  const char *name;
  nb_code (*run)(nbopt_graph *o, bool *changed);
} nbopt_pass;

/* The pipeline, in order: layouts first (they make the Transposes the next pass moves and
   cancels), then the cleanups, which also remove what the earlier passes left. */
static const nbopt_pass passes[] = {
    {NB_PASS_LAYOUT, "layout", nbopt_layout},       {NB_PASS_TRANSPOSE, "transpose", nbopt_sink_transposes},
    {NB_PASS_SIMPLIFY, "simplify", nbopt_simplify}, {NB_PASS_CSE, "cse", nbopt_cse},
    {NB_PASS_FOLD, "fold", nbopt_fold_constants},
};
enum { NPASSES = sizeof passes / sizeof *passes, MAX_ROUNDS = 4 };

/* Runs the passes of `bits` until none changes anything (or MAX_ROUNDS rounds: each round
   only shrinks the graph, so this bounds the time, not the result's correctness). */
static nb_code run_passes(nbopt_graph *o, unsigned bits) {
  bool changed = true;
  for (int round = 0; changed && round < MAX_ROUNDS; round++) {
    changed = false;
    for (int i = 0; i < NPASSES; i++) {
      if (!(bits & passes[i].bit)) continue;
      nb_code code = passes[i].run(o, &changed);
      if (code) return code;
    }
  }
  return NB_OK;
}

/* Reads g in, runs the passes of `bits` and writes the result: *out and mapped (keys[i] in it).
   Fusion comes last, on the written graph: it rewrites an nb_graph in place (fuse.c). */
static nb_code optimize(const nb_graph *g, const int64_t *keys, int nfeed, int nfetch, unsigned bits, nb_graph **out,
                        int64_t *mapped) {
  nbopt_graph o;
  char err[NBCORE_ERR_CAP];
  nb_code code = nbopt_read(&o, g, keys, nfeed, nfetch);
  if (!code) code = run_passes(&o, bits);
  if (!code) code = nbopt_write(&o, out, mapped, err, sizeof err);
  nbopt_free(&o);
  if (!code && (bits & NB_PASS_FUSE)) code = nbopt_fuse_elementwise(*out, mapped, nfeed, nfetch, true);
  if (code && *out) {
    nb_graph_free(*out);
    *out = NULL;
  }
  return code;
}

/* The session hook (see nbrt_optimize_fn). A rewritten node that fails to build would be
   a pass's mistake: the session then runs the graph as built. */
static nb_code optimize_for_session(const nb_graph *g, const int64_t *keys, int nfeed, int nfetch,
                                    const nb_session_opts *opts, nb_graph **out, int64_t *mapped) {
  nb_code code = optimize(g, keys, nfeed, nfetch, opts->passes, out, mapped);
  return code == NB_NOMEM ? code : NB_OK;
}

static nb_session_opts env_opts;

/* NABLA_OPTIMIZE: "none", "all", or pass names separated by commas. */
static void read_env(void) {
  const char *v = getenv("NABLA_OPTIMIZE");
  env_opts.passes = NB_PASS_ALL;
  if (!v || !*v || strcmp(v, "all") == 0) return;
  env_opts.passes = 0;
  for (const char *p = v; *p;) {
    size_t n = strcspn(p, ",");
    if (n == 4 && strncmp(p, "fuse", 4) == 0) env_opts.passes |= NB_PASS_FUSE;
    for (int i = 0; i < NPASSES; i++)
      if (strlen(passes[i].name) == n && strncmp(p, passes[i].name, n) == 0) env_opts.passes |= passes[i].bit;
    p += n + (p[n] == ',');
  }
}

nb_session_opts nb_session_opts_default(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, read_env);
  return env_opts;
}

nb_session *nb_session_new_with_opts(nb_graph *g, const nb_session_opts *opts) {
  nb_session_opts o = opts ? *opts : nb_session_opts_default();
  return nbrt_session_new(g, o.passes ? optimize_for_session : NULL, &o);
}

nb_session *nb_session_new(nb_graph *g) { return nb_session_new_with_opts(g, NULL); }

nb_code nb_graph_optimize(nb_graph *g, nb_tensor *const *feed, int nfeed, nb_tensor *const *fetch, int nfetch,
                          const nb_session_opts *opts, nb_graph **out) {
  if (!out) return NB_INVALID;
  *out = NULL;
  if (!g || nfeed < 0 || nfetch < 0 || (nfeed && !feed) || (nfetch && !fetch)) return NB_INVALID;
  for (int i = 0; i < nfeed + nfetch; i++) {
    const nb_tensor *x = i < nfeed ? feed[i] : fetch[i - nfeed];
    if (!x || x->graph != g) return NB_INVALID;
  }
  int64_t *keys = malloc((size_t)(2 * (nfeed + nfetch) + 1) * sizeof *keys);
  if (!keys) return NB_NOMEM;
  int64_t *mapped = keys + nfeed + nfetch;
  for (int i = 0; i < nfeed + nfetch; i++) keys[i] = nbgraph_key_of(i < nfeed ? feed[i] : fetch[i - nfeed]);
  nb_session_opts o = opts ? *opts : nb_session_opts_default();
  nb_code code = optimize(g, keys, nfeed, nfetch, o.passes, out, mapped);
  free(keys);
  return code;
}
