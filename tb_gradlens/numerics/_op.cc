// TensorFlow ops around _kernel.c: the one-pass statistics as graph ops.
//
// Built by tb_gradlens/numerics/kernel.py against the installed TensorFlow's
// headers (tf.sysconfig), once per TensorFlow version, and loaded with
// tf.load_op_library.  As ops they run without Python or its lock, which a
// tf.numpy_function call takes on every logged step.  CPU only.

#include <cstdint>
#include <limits>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

extern "C" {
int gl_gradient_statistics(int64_t count, const void* const* data, const int32_t* dtypes, const int64_t* sizes,
                           const double* implicit_zeros, int32_t min_exponent, int32_t zero_bin, int32_t n_bins,
                           int32_t subnormal_bins, float* stats, float* hist, int32_t threads);
int gl_divergence_metrics(int64_t count, const void* const* candidates, const int32_t* candidate_dtypes,
                          const void* const* references, const int32_t* reference_dtypes, const int64_t* sizes,
                          const double* implicit_zeros, const int32_t* mantissa_bits, const int32_t* min_normal,
                          double floor_fraction, double* metrics, int32_t threads);
int gl_update_statistics(int64_t count, const void* const* before, const void* const* after, const int32_t* dtypes,
                         const void* const* gradients, const int32_t* gradient_dtypes, const int64_t* sizes,
                         float* out, int32_t threads);
}

namespace {

using tensorflow::DataType;
using tensorflow::OpInputList;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::InferenceContext;

constexpr int kGradStatsColumns = 14;
constexpr int kDivergenceColumns = 9;
constexpr int kUpdateColumns = 3;

// The dtype codes of _kernel.c.
int32_t Code(DataType dtype) {
  switch (dtype) {
    case tensorflow::DT_FLOAT: return 0;
    case tensorflow::DT_BFLOAT16: return 1;
    case tensorflow::DT_HALF: return 2;
    default: return 3;  // DT_DOUBLE
  }
}

struct Arrays {
  std::vector<const void*> data;
  std::vector<int32_t> codes;
  std::vector<int64_t> sizes;
};

Arrays Gather(const OpInputList& list) {
  Arrays out;
  for (int i = 0; i < list.size(); ++i) {
    const Tensor& t = list[i];
    out.data.push_back(t.tensor_data().data());
    out.codes.push_back(Code(t.dtype()));
    out.sizes.push_back(t.NumElements());
  }
  return out;
}

int32_t Threads(OpKernelContext* context, const Arrays& arrays) {
  int64_t total = 0;
  for (int64_t n : arrays.sizes) total += n;
  if (total < (1 << 17)) return 1;  // kernel.PARALLEL_ELEMENTS
  return context->device()->tensorflow_cpu_worker_threads()->num_threads;
}

class GradientStatisticsOp : public OpKernel {
 public:
  explicit GradientStatisticsOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("min_exponent", &min_exponent_));
    OP_REQUIRES_OK(c, c->GetAttr("zero_bin", &zero_bin_));
    OP_REQUIRES_OK(c, c->GetAttr("n_bins", &n_bins_));
    OP_REQUIRES_OK(c, c->GetAttr("subnormal_bins", &subnormal_bins_));
  }

  void Compute(OpKernelContext* c) override {
    OpInputList values;
    OP_REQUIRES_OK(c, c->input_list("values", &values));
    const Tensor& zeros = c->input(values.size());
    const bool record = c->input(values.size() + 1).scalar<bool>()();
    Arrays a = Gather(values);
    const int64_t n = record ? values.size() : 0;  // not recording: nothing computed, 0 rows
    Tensor* stats = nullptr;
    Tensor* hist = nullptr;
    OP_REQUIRES_OK(c, c->allocate_output(0, TensorShape({n, kGradStatsColumns}), &stats));
    OP_REQUIRES_OK(c, c->allocate_output(1, TensorShape({n, n_bins_}), &hist));
    if (n == 0) return;
    // Inside a training step nothing may raise: a failure leaves NaN rows
    // (count NaN marks them; kernel.py reports it through the failure policy).
    int result = zeros.NumElements() == values.size()
        ? gl_gradient_statistics(n, a.data.data(), a.codes.data(), a.sizes.data(), zeros.flat<double>().data(),
                                 min_exponent_, zero_bin_, n_bins_, subnormal_bins_, stats->flat<float>().data(),
                                 hist->flat<float>().data(), Threads(c, a))
        : -1;
    if (result != 0) {
      stats->flat<float>().setConstant(std::numeric_limits<float>::quiet_NaN());
      hist->flat<float>().setConstant(std::numeric_limits<float>::quiet_NaN());
    }
  }

 private:
  int min_exponent_, zero_bin_, n_bins_, subnormal_bins_;
};

class DivergenceMetricsOp : public OpKernel {
 public:
  explicit DivergenceMetricsOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("mantissa_bits", &mantissa_bits_));
    OP_REQUIRES_OK(c, c->GetAttr("min_normal", &min_normal_));
  }

  void Compute(OpKernelContext* c) override {
    OpInputList candidates, references;
    OP_REQUIRES_OK(c, c->input_list("candidates", &candidates));
    OP_REQUIRES_OK(c, c->input_list("references", &references));
    Arrays cand = Gather(candidates), ref = Gather(references);
    const int64_t n = candidates.size();
    const double floor_fraction = c->input(2 * n).scalar<double>()();
    const Tensor& zeros = c->input(2 * n + 1);
    // Inside a training step nothing may raise: pairs of different sizes
    // (the Python side never sends them) or a failure leave NaN rows
    // (nonfinite NaN marks them; divergence.py reports it).
    bool paired = zeros.NumElements() == n;
    for (int64_t i = 0; i < n; ++i) paired = paired && cand.sizes[i] == ref.sizes[i];
    Tensor* out = nullptr;
    OP_REQUIRES_OK(c, c->allocate_output(0, TensorShape({n, kDivergenceColumns}), &out));
    std::vector<int32_t> p(mantissa_bits_.begin(), mantissa_bits_.end());
    std::vector<int32_t> e(min_normal_.begin(), min_normal_.end());
    int result = paired
        ? gl_divergence_metrics(n, cand.data.data(), cand.codes.data(), ref.data.data(), ref.codes.data(),
                                cand.sizes.data(), zeros.flat<double>().data(), p.data(), e.data(), floor_fraction,
                                out->flat<double>().data(), Threads(c, cand))
        : -1;
    if (result != 0) out->flat<double>().setConstant(std::numeric_limits<double>::quiet_NaN());
  }

 private:
  std::vector<int> mantissa_bits_, min_normal_;
};

class UpdateStatisticsOp : public OpKernel {
 public:
  explicit UpdateStatisticsOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("gradient_rows", &gradient_rows_));
  }

  void Compute(OpKernelContext* c) override {
    OpInputList before, after, gradients;
    OP_REQUIRES_OK(c, c->input_list("before", &before));
    OP_REQUIRES_OK(c, c->input_list("after", &after));
    OP_REQUIRES_OK(c, c->input_list("gradients", &gradients));
    Arrays b = Gather(before), a = Gather(after), g = Gather(gradients);
    const int64_t n = before.size();
    std::vector<const void*> grad_data(n, nullptr);
    std::vector<int32_t> grad_codes(n, -1);
    for (size_t k = 0; k < gradient_rows_.size(); ++k) {
      grad_data[gradient_rows_[k]] = g.data[k];
      grad_codes[gradient_rows_[k]] = g.codes[k];
    }
    Tensor* out = nullptr;
    OP_REQUIRES_OK(c, c->allocate_output(0, TensorShape({n, kUpdateColumns}), &out));
    int result = gl_update_statistics(n, b.data.data(), a.data.data(), b.codes.data(), grad_data.data(),
                                      grad_codes.data(), b.sizes.data(), out->flat<float>().data(), Threads(c, b));
    // Inside a training step nothing may raise: a failure leaves NaN rows (updates.py reports it).
    if (result != 0) out->flat<float>().setConstant(std::numeric_limits<float>::quiet_NaN());
  }

 private:
  std::vector<int> gradient_rows_;
};

// The values themselves when `record` is true (their buffers shared, no copy),
// else empty tensors: a snapshot of variables' values that a step not
// logged does not keep alive, so that the optimizer's in-place update copies
// nothing then (a variable read before an update keeps its old value:
// TensorFlow copies a buffer on write while a read still holds it).
class KeepIfOp : public OpKernel {
 public:
  explicit KeepIfOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* c) override {
    const bool record = c->input(0).scalar<bool>()();
    for (int i = 1; i < c->num_inputs(); ++i) {
      if (record) {
        c->set_output(i - 1, c->input(i));
      } else {
        Tensor* out = nullptr;
        OP_REQUIRES_OK(c, c->allocate_output(i - 1, TensorShape({0}), &out));
      }
    }
  }
};

tensorflow::Status RowsOf(InferenceContext* c, int n, int columns, int output) {
  c->set_output(output, c->Matrix(n, columns));
  return tensorflow::OkStatus();
}

}  // namespace

REGISTER_OP("GradlensGradientStatistics")
    .Input("values: T")
    .Input("implicit_zeros: double")
    .Input("record: bool")
    .Output("stats: float")
    .Output("histogram: float")
    .Attr("T: list({float, bfloat16, half, double})")
    .Attr("min_exponent: int")
    .Attr("zero_bin: int")
    .Attr("n_bins: int")
    .Attr("subnormal_bins: int")
    .SetShapeFn([](InferenceContext* c) {
      // One row per value, or none when `record` is false.
      int bins;
      TF_RETURN_IF_ERROR(c->GetAttr("n_bins", &bins));
      c->set_output(0, c->Matrix(InferenceContext::kUnknownDim, kGradStatsColumns));
      c->set_output(1, c->Matrix(InferenceContext::kUnknownDim, bins));
      return tensorflow::OkStatus();
    });

REGISTER_OP("GradlensDivergenceMetrics")
    .Input("candidates: Tc")
    .Input("references: Tr")
    .Input("floor_fraction: double")
    .Input("implicit_zeros: double")
    .Output("metrics: double")
    .Attr("Tc: list({float, bfloat16, half, double})")
    .Attr("Tr: list({float, bfloat16, half, double})")
    .Attr("mantissa_bits: list(int)")
    .Attr("min_normal: list(int)")
    .SetShapeFn([](InferenceContext* c) { return RowsOf(c, (c->num_inputs() - 2) / 2, kDivergenceColumns, 0); });

REGISTER_OP("GradlensUpdateStatistics")
    .Input("before: T")
    .Input("after: T")
    .Input("gradients: Tg")
    .Output("statistics: float")
    .Attr("T: list({float, bfloat16, half, double})")
    .Attr("Tg: list({float, bfloat16, half, double}) >= 0")
    .Attr("gradient_rows: list(int)")
    .SetShapeFn([](InferenceContext* c) {
      std::vector<DataType> types;
      TF_RETURN_IF_ERROR(c->GetAttr("T", &types));
      return RowsOf(c, static_cast<int>(types.size()), kUpdateColumns, 0);
    });

REGISTER_OP("GradlensKeepIf")
    .Input("record: bool")
    .Input("values: T")
    .Output("kept: T")
    .Attr("T: list(type) >= 1")
    .SetShapeFn([](InferenceContext* c) {
      // The values' shapes when recording, [0] otherwise.
      for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->UnknownShape());
      return tensorflow::OkStatus();
    });

REGISTER_KERNEL_BUILDER(Name("GradlensGradientStatistics").Device(tensorflow::DEVICE_CPU), GradientStatisticsOp);
REGISTER_KERNEL_BUILDER(Name("GradlensDivergenceMetrics").Device(tensorflow::DEVICE_CPU), DivergenceMetricsOp);
REGISTER_KERNEL_BUILDER(Name("GradlensUpdateStatistics").Device(tensorflow::DEVICE_CPU), UpdateStatisticsOp);
REGISTER_KERNEL_BUILDER(Name("GradlensKeepIf").Device(tensorflow::DEVICE_CPU).HostMemory("record"), KeepIfOp);
