/* EdgeOscAttention for interpreters that load delegates but cannot register a custom op (ai-edge-litert's
 * load_delegate, through the external-delegate plugin entry points at the end). Such an interpreter builds a graph
 * whose custom op it cannot resolve and fails only when that node is prepared; the delegate claims those nodes
 * first and runs each with the op's own init, prepare and invoke (edgeosc_tflite_op.c) on the node's own inputs,
 * outputs and options: the same integers as with the op registered. */
#include <stdlib.h>
#include <string.h>

#include "tflite_abi.h"

const TfLiteRegistration *edgeosc_tflite_registration(void);

enum { kTfLiteBuiltinCustom = 32, kTfLiteBuiltinDelegate = 51 };
/* Without it the interpreter prepares the whole graph before applying the delegate, to learn whether its tensors
 * are dynamic, and fails on the op it cannot resolve. The op's outputs keep their shapes either way. */
enum { kTfLiteDelegateFlagsAllowDynamicTensors = 1 };

typedef struct { /* one delegated subset: its op nodes in execution order (each a copy holding the op's data) */
  int n;
  TfLiteNode nodes[];
} Subset;

static void subset_free(TfLiteContext *context, void *buffer) {
  Subset *s = (Subset *)buffer;
  int i;
  if (!s) return;
  for (i = 0; i < s->n; ++i) edgeosc_tflite_registration()->free(context, s->nodes[i].user_data);
  free(s);
}

static void *subset_init(TfLiteContext *context, const char *buffer, size_t length) {
  const TfLiteDelegateParams *params = (const TfLiteDelegateParams *)(const void *)buffer;
  const TfLiteRegistration *op = edgeosc_tflite_registration();
  const int n = params->nodes_to_replace->size;
  Subset *s = (Subset *)calloc(1, sizeof(Subset) + (size_t)n * sizeof(TfLiteNode));
  (void)length;
  for (; s && s->n < n; ++s->n) {
    TfLiteNode *node;
    TfLiteRegistration *reg;
    if (context->GetNodeAndRegistration(context, params->nodes_to_replace->data[s->n], &node, &reg) != kTfLiteOk) {
      subset_free(context, s);
      return NULL;
    }
    s->nodes[s->n] = *node; /* the op reads inputs, outputs and its user data */
    s->nodes[s->n].user_data = op->init(context, (const char *)node->custom_initial_data,
                                        (size_t)node->custom_initial_data_size);
  }
  return s;
}

static TfLiteStatus subset_run(TfLiteContext *context, TfLiteNode *node, int invoke) {
  Subset *s = (Subset *)node->user_data;
  const TfLiteRegistration *op = edgeosc_tflite_registration();
  int i;
  if (!s) {
    context->ReportError(context, "EdgeOscAttention delegate: could not read the op's nodes");
    return kTfLiteError;
  }
  for (i = 0; i < s->n; ++i) {
    const TfLiteStatus status = invoke ? op->invoke(context, &s->nodes[i]) : op->prepare(context, &s->nodes[i]);
    if (status != kTfLiteOk) return status;
  }
  return kTfLiteOk;
}

static TfLiteStatus subset_prepare(TfLiteContext *context, TfLiteNode *node) { return subset_run(context, node, 0); }

static TfLiteStatus subset_invoke(TfLiteContext *context, TfLiteNode *node) { return subset_run(context, node, 1); }

/* Claims every node of the execution plan that is the custom op EdgeOscAttention. */
static TfLiteStatus delegate_prepare(TfLiteContext *context, TfLiteDelegate *delegate) {
  const char *const name = edgeosc_tflite_registration()->custom_name;
  TfLiteIntArray *plan, *claim;
  TfLiteRegistration kernel;
  TfLiteStatus status = kTfLiteOk;
  int i;
  if (context->GetExecutionPlan(context, &plan) != kTfLiteOk) return kTfLiteError;
  claim = (TfLiteIntArray *)malloc(sizeof(TfLiteIntArray) + (size_t)plan->size * sizeof(int));
  if (!claim) return kTfLiteError;
  claim->size = 0;
  for (i = 0; i < plan->size; ++i) {
    TfLiteNode *node;
    TfLiteRegistration *reg;
    if (context->GetNodeAndRegistration(context, plan->data[i], &node, &reg) != kTfLiteOk) {
      status = kTfLiteError;
      break;
    }
    if (reg->builtin_code == kTfLiteBuiltinCustom && reg->custom_name && !strcmp(reg->custom_name, name))
      claim->data[claim->size++] = plan->data[i];
  }
  memset(&kernel, 0, sizeof kernel);
  kernel.init = subset_init;
  kernel.free = subset_free;
  kernel.prepare = subset_prepare;
  kernel.invoke = subset_invoke;
  kernel.builtin_code = kTfLiteBuiltinDelegate;
  kernel.custom_name = "EdgeOscAttentionDelegate";
  kernel.version = 1;
  if (status == kTfLiteOk && claim->size)
    status = context->ReplaceNodeSubsetsWithDelegateKernels(context, kernel, claim, delegate);
  free(claim);
  return status;
}

/* The external-delegate plugin ABI (what load_delegate looks up); this delegate takes no options. */
TfLiteDelegate *tflite_plugin_create_delegate(char **keys, char **values, int n, void (*report_error)(const char *)) {
  TfLiteDelegate *d = (TfLiteDelegate *)calloc(1, sizeof(TfLiteDelegate));
  (void)keys, (void)values, (void)n;
  if (!d && report_error) report_error("EdgeOscAttention delegate: out of memory");
  if (d) d->Prepare = delegate_prepare, d->flags = kTfLiteDelegateFlagsAllowDynamicTensors;
  return d;
}

void tflite_plugin_destroy_delegate(TfLiteDelegate *d) { free(d); }
