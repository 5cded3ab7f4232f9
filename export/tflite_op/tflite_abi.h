#ifndef EDGEOSC_TFLITE_ABI_H_
#define EDGEOSC_TFLITE_ABI_H_

#include <stddef.h>
#include <stdint.h>

/* The TFLite C ABI: only what the op and its delegate touch, written from the layout of
 * tensorflow/lite/core/c/common.h of TensorFlow 2.14 (non-TF_LITE_STATIC_MEMORY), which LiteRT 2.x keeps.
 * TfLiteTensor is complete because kernels index context->tensors; TfLiteNode and TfLiteContext stop at the last
 * field read; TfLiteRegistration is complete because ReplaceNodeSubsetsWithDelegateKernels takes it by value. */
typedef int TfLiteStatus; /* kTfLiteOk = 0, kTfLiteError = 1 */
enum { kTfLiteOk = 0, kTfLiteError = 1 };
enum { kTfLiteInt32 = 2, kTfLiteInt8 = 9 };

typedef struct {
  int size;
  int data[];
} TfLiteIntArray;

typedef struct {
  float scale;
  int32_t zero_point;
} TfLiteQuantizationParams;

typedef struct {
  int type;
  void *params;
} TfLiteQuantization;

typedef struct {
  int type; /* TfLiteType */
  union {
    int32_t *i32;
    int8_t *int8;
    void *raw;
  } data;
  TfLiteIntArray *dims;
  TfLiteQuantizationParams params;
  int allocation_type;
  size_t bytes;
  const void *allocation;
  const char *name;
  void *delegate;
  int buffer_handle;
  _Bool data_is_stale;
  _Bool is_variable;
  TfLiteQuantization quantization;
  void *sparsity;
  const TfLiteIntArray *dims_signature;
} TfLiteTensor;

typedef struct {
  TfLiteIntArray *inputs;
  TfLiteIntArray *outputs;
  TfLiteIntArray *intermediates;
  TfLiteIntArray *temporaries;
  void *user_data;
  void *builtin_data;
  const void *custom_initial_data; /* a custom op's options */
  int custom_initial_data_size;
} TfLiteNode;

typedef struct TfLiteContext TfLiteContext;
struct TfLiteDelegate;

typedef struct TfLiteRegistration {
  void *(*init)(TfLiteContext *context, const char *buffer, size_t length);
  void (*free)(TfLiteContext *context, void *buffer);
  TfLiteStatus (*prepare)(TfLiteContext *context, TfLiteNode *node);
  TfLiteStatus (*invoke)(TfLiteContext *context, TfLiteNode *node);
  const char *(*profiling_string)(const TfLiteContext *context, const TfLiteNode *node);
  int32_t builtin_code;
  const char *custom_name;
  int version;
  void *registration_external;
  void *(*async_kernel)(TfLiteContext *context, TfLiteNode *node);
  uint64_t inplace_operator;
} TfLiteRegistration;

struct TfLiteContext {
  size_t tensors_size;
  TfLiteStatus (*GetExecutionPlan)(struct TfLiteContext *, TfLiteIntArray **);
  TfLiteTensor *tensors;
  void *impl_;
  TfLiteStatus (*ResizeTensor)(struct TfLiteContext *, TfLiteTensor *, TfLiteIntArray *);
  void (*ReportError)(struct TfLiteContext *, const char *msg, ...);
  TfLiteStatus (*AddTensors)(struct TfLiteContext *, int tensors_to_add, int *first_new_tensor_index);
  TfLiteStatus (*GetNodeAndRegistration)(struct TfLiteContext *, int node_index, TfLiteNode **node,
                                         TfLiteRegistration **registration);
  TfLiteStatus (*ReplaceNodeSubsetsWithDelegateKernels)(struct TfLiteContext *, TfLiteRegistration registration,
                                                        const TfLiteIntArray *nodes_to_replace,
                                                        struct TfLiteDelegate *delegate);
};

typedef struct TfLiteDelegate {
  void *data_;
  TfLiteStatus (*Prepare)(TfLiteContext *context, struct TfLiteDelegate *delegate);
  void *CopyFromBufferHandle, *CopyToBufferHandle, *FreeBufferHandle; /* unused: no buffer handles */
  int64_t flags;
  void *opaque_delegate_builder;
} TfLiteDelegate;

typedef struct { /* what a delegate kernel's init receives as its buffer */
  TfLiteDelegate *delegate;
  TfLiteIntArray *nodes_to_replace;
  TfLiteIntArray *input_tensors;
  TfLiteIntArray *output_tensors;
} TfLiteDelegateParams;

#endif /* EDGEOSC_TFLITE_ABI_H_ */
