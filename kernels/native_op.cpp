// The explorer's compiled operator: a sparse layer's remembered call, run from C++.
//
// `explorer::sparse_call(x, module_id)` is what a model compiled with torch.compile calls for a
// swapped layer (and what CUDA graphs capture). For an input whose call the layer has already
// made once from Python (the route chosen, the plan or kernel set up), Python hands this file a
// *program*: the steps that call is made of, each a cuSPARSELt matmul or a kernel launch with
// every argument but the input's and output's pointers fixed, or torch's own dense product on a
// weight the program holds (a route that stayed dense inside a block of sparse steps). A later call of the same shape
// runs the program here: one output allocation and one library or driver call per step, with
// no Python in between. Any other input (a new shape, a layer whose route is not a program, a
// layer run in a mode it was not set up for) goes to the Python operator
// `explorer::sparse_forward`, which decides and remembers as before.
//
// The library and driver functions come in as addresses (set_functions), so this file needs
// no CUDA headers or libraries to build: only libtorch. Tokens keep raw pointers honest: each
// program names the tokens of what its pointers belong to (a layer's table of calls, a plan, a
// kernel's set-up), Python retires a token when that is dropped, and a program with a retired
// token is never run again.

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

// cuLaunchKernel(function, grid x/y/z, block x/y/z, shared bytes, stream, params, extra)
using LaunchFn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void*, void**, void**);
// cuStreamIsCapturing(stream, status*)
using CaptureFn = int (*)(void*, int*);
// cusparseLtMatmul(handle, plan, alpha, A, B, beta, C, D, workspace, streams, stream count)
using MatmulFn = int (*)(const void*, const void*, const void*, const void*, const void*,
                         const void*, const void*, void*, void*, void**, int32_t);

enum Source : int64_t { FIXED = 0, IN_PTR = 1, OUT_PTR = 2, IN_ROW_STRIDE = 3 };
enum Kind : int64_t { LAUNCH = 0, MATMUL = 1, LINEAR = 2 };
enum Mode : int64_t { AUTO = 0, WALL = 1, GRAPHS = 2 };
enum Clock : int64_t { CLOCK_WALL = 0, CLOCK_GPU = 1 };
constexpr int kMaxArgs = 24;

struct Arg {
  int64_t source;
  int64_t size;   // bytes: 4 or 8
  int64_t value;  // FIXED: the value; IN_PTR: a byte offset
};

struct Step {
  int64_t kind = LAUNCH;
  int64_t out_cols = 0;
  // LAUNCH
  int64_t function = 0;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared = 0;
  std::vector<Arg> args;
  // MATMUL
  int64_t handle = 0, plan = 0, alpha = 0, a = 0, beta = 0, workspace = 0;
  // LINEAR: at::linear(input, weight, bias), the tensors held by the program
  at::Tensor weight;
  std::optional<at::Tensor> bias;
};

struct Program {
  int64_t rows = 0, cols = 0, device = -1;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<int64_t> tokens;
  std::vector<Step> steps;
};

using ProgramPtr = std::shared_ptr<const Program>;

struct ModuleEntry {
  int64_t mode = AUTO;
  std::vector<ProgramPtr> programs[2];  // by clock
};

struct State {
  std::mutex lock;
  std::unordered_map<int64_t, ModuleEntry> modules;
  std::unordered_set<int64_t> retired;
  int64_t next_token = 1;
  LaunchFn launch = nullptr;
  CaptureFn capturing = nullptr;
  MatmulFn matmul = nullptr;
  std::atomic<int64_t> native_calls{0};
  std::atomic<int64_t> python_calls{0};
  std::atomic<int64_t> refused_calls{0};
};

State& state() {
  static State s;
  return s;
}

// Reads a program's code into steps, a LINEAR step taking the next of `tensors` as its weight
// (and the one after as its bias, where it has one); returns "" or what is wrong with it.
// Nothing in this file throws: a bad program is refused with a message Python raises, and a
// call that fails is handed to Python, which raises its own error.
std::string decode_steps(const std::vector<int64_t>& code, const std::vector<at::Tensor>& tensors,
                         std::vector<Step>& steps) {
  size_t i = 0;
  size_t held = 0;  // tensors taken so far
  bool short_code = false;
  auto next = [&]() -> int64_t {
    if (i >= code.size()) {
      short_code = true;
      return 0;
    }
    return code[i++];
  };
  auto say = [](const char* what, int64_t value) {
    return std::string("explorer native op: ") + what + " " + std::to_string(value);
  };
  while (i < code.size()) {
    Step s;
    s.kind = next();
    s.out_cols = next();
    if (s.out_cols <= 0) return say("a step's output has columns:", s.out_cols);
    if (s.kind == LAUNCH) {
      s.function = next();
      for (auto& g : s.grid) g = static_cast<unsigned>(next());
      for (auto& b : s.block) b = static_cast<unsigned>(next());
      s.shared = static_cast<unsigned>(next());
      const int64_t n = next();
      if (n < 0 || n > kMaxArgs) return say("a launch's argument count is out of range:", n);
      for (int64_t j = 0; j < n; ++j) {
        Arg arg{next(), next(), next()};
        if (arg.source < FIXED || arg.source > IN_ROW_STRIDE) {
          return say("unknown argument source", arg.source);
        }
        if (arg.size != 4 && arg.size != 8) return say("an argument's size in bytes is", arg.size);
        s.args.push_back(arg);
      }
    } else if (s.kind == MATMUL) {
      s.handle = next();
      s.plan = next();
      s.alpha = next();
      s.a = next();
      s.beta = next();
      s.workspace = next();
    } else if (s.kind == LINEAR) {
      const int64_t with_bias = next();
      if (with_bias != 0 && with_bias != 1) return say("a dense step's bias flag is", with_bias);
      if (held + 1 + with_bias > tensors.size()) {
        return say("a dense step names more tensors than were handed:",
                   static_cast<int64_t>(tensors.size()));
      }
      s.weight = tensors[held++];
      if (with_bias) s.bias = tensors[held++];
      if (s.weight.dim() != 2 || s.weight.size(0) != s.out_cols) {
        return say("a dense step's weight does not have the step's output rows:", s.out_cols);
      }
    } else {
      return say("unknown step kind", s.kind);
    }
    if (short_code) return say("a program's code ends early, after numbers:", code.size());
    steps.push_back(std::move(s));
  }
  if (held != tensors.size()) {
    return say("tensors handed but named by no step:", static_cast<int64_t>(tensors.size() - held));
  }
  return "";
}

// The program for x, or nullptr (then Python runs the call). Takes the state's lock.
ProgramPtr find_program(const at::Tensor& x, int64_t module_id, void* stream) {
  State& st = state();
  ProgramPtr dropped;  // released after the lock: a program may hold tensors
  if (!x.is_contiguous() || x.dim() < 1 || x.size(-1) < 1) return nullptr;
  if (reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 != 0) return nullptr;
  const int64_t cols = x.size(-1);
  const int64_t rows = x.numel() / cols;
  bool capturing = false;
  if (x.is_cuda() && st.capturing != nullptr) {
    int status = 0;
    if (st.capturing(stream, &status) != 0) return nullptr;
    capturing = status != 0;
  }
  std::lock_guard<std::mutex> guard(st.lock);
  auto found = st.modules.find(module_id);
  if (found == st.modules.end()) return nullptr;
  ModuleEntry& entry = found->second;
  int64_t clock = CLOCK_WALL;
  if (entry.mode == AUTO) {
    clock = capturing ? CLOCK_GPU : CLOCK_WALL;
  } else if (entry.mode == GRAPHS) {
    if (!capturing) return nullptr;  // Python's call says once that no graph replays it
    clock = CLOCK_GPU;
  }
  auto& programs = entry.programs[clock];
  const int64_t device = x.is_cuda() ? x.get_device() : -1;
  for (auto it = programs.begin(); it != programs.end(); ++it) {
    const Program& p = **it;
    if (p.rows != rows || p.cols != cols || p.dtype != x.scalar_type() || p.device != device) {
      continue;
    }
    for (int64_t t : p.tokens) {
      if (st.retired.count(t)) {
        dropped = std::move(*it);
        programs.erase(it);  // what its pointers belong to is gone
        return nullptr;
      }
    }
    return *it;
  }
  return nullptr;
}

// Each returns the library's or driver's code: 0 for success.
int run_launch(const State& st, const Step& s, const at::Tensor& in, const at::Tensor& out,
               void* stream) {
  if (st.launch == nullptr) return -1;
  int64_t values[kMaxArgs];
  void* params[kMaxArgs];
  const auto in_ptr = reinterpret_cast<int64_t>(in.data_ptr());
  const auto out_ptr = reinterpret_cast<int64_t>(out.data_ptr());
  for (size_t j = 0; j < s.args.size(); ++j) {
    const Arg& arg = s.args[j];
    int64_t v = arg.value;
    if (arg.source == IN_PTR) {
      v = in_ptr + arg.value;
    } else if (arg.source == OUT_PTR) {
      v = out_ptr;
    } else if (arg.source == IN_ROW_STRIDE) {
      v = in.size(-1);
    }
    values[j] = 0;
    if (arg.size == 4) {
      const auto narrow = static_cast<int32_t>(v);
      std::memcpy(&values[j], &narrow, 4);
    } else {
      values[j] = v;
    }
    params[j] = &values[j];
  }
  return st.launch(reinterpret_cast<void*>(s.function), s.grid[0], s.grid[1], s.grid[2],
                   s.block[0], s.block[1], s.block[2], s.shared, stream, params, nullptr);
}

int run_matmul(const State& st, const Step& s, const at::Tensor& in, const at::Tensor& out,
               void* stream) {
  if (st.matmul == nullptr) return -1;
  void* streams[1] = {stream};
  void* d = out.data_ptr();
  return st.matmul(
      reinterpret_cast<const void*>(s.handle), reinterpret_cast<const void*>(s.plan),
      reinterpret_cast<const void*>(s.alpha), reinterpret_cast<const void*>(s.a), in.data_ptr(),
      reinterpret_cast<const void*>(s.beta), d, d, reinterpret_cast<void*>(s.workspace), streams,
      1);
}

// torch's dense product into `out`; any error it raises hands the call to Python
int run_linear(const Step& s, const at::Tensor& in, at::Tensor& out) {
  try {
    out = at::linear(in, s.weight, s.bias);
  } catch (const std::exception&) {
    return -2;
  }
  return 0;
}

at::Tensor python_call(const at::Tensor& x, int64_t module_id) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("explorer::sparse_forward", "")
                       .typed<at::Tensor(const at::Tensor&, int64_t)>();
  ++state().python_calls;
  return op.call(x, module_id);
}

at::Tensor sparse_call(const at::Tensor& x, int64_t module_id) {
  void* stream = nullptr;
  if (x.is_cuda()) {
    const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    // kernels are launched in the current device's context: another device's input goes to
    // Python, which sets its own device up
    if (impl->getDevice() != x.device()) return python_call(x, module_id);
    stream = impl->getStream(x.device()).native_handle();
  }
  ProgramPtr program = find_program(x, module_id, stream);
  if (!program) return python_call(x, module_id);
  State& st = state();
  const int64_t rows = program->rows;
  at::Tensor in = x.view({rows, program->cols});
  for (const Step& s : program->steps) {
    at::Tensor out;
    int code = 0;
    if (s.kind == LINEAR) {
      code = run_linear(s, in, out);
    } else {
      out = at::empty({rows, s.out_cols}, x.options());
      code = s.kind == MATMUL ? run_matmul(st, s, in, out, stream)
                              : run_launch(st, s, in, out, stream);
    }
    // refused (another context, a library error): Python makes the call again and raises
    // its own error if it fails there too; every step writes a new tensor, so nothing is lost
    if (code != 0) {
      ++st.refused_calls;
      return python_call(x, module_id);
    }
    in = out;
  }
  ++st.native_calls;
  if (x.dim() == 2) return in;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = in.size(1);
  return in.view(shape);
}

void set_functions(int64_t launch, int64_t capturing, int64_t matmul) {
  State& st = state();
  std::lock_guard<std::mutex> guard(st.lock);
  st.launch = reinterpret_cast<LaunchFn>(launch);
  st.capturing = reinterpret_cast<CaptureFn>(capturing);
  st.matmul = reinterpret_cast<MatmulFn>(matmul);
}

std::vector<int64_t> functions() {
  State& st = state();
  std::lock_guard<std::mutex> guard(st.lock);
  return {reinterpret_cast<int64_t>(st.launch), reinterpret_cast<int64_t>(st.capturing),
          reinterpret_cast<int64_t>(st.matmul)};
}

// Returns "" or why the program is refused.
std::string set_program(int64_t module_id, int64_t mode, int64_t clock, int64_t rows, int64_t cols,
                        c10::ScalarType dtype, int64_t device, std::vector<int64_t> tokens,
                        std::vector<int64_t> code, std::vector<at::Tensor> tensors) {
  if (mode < AUTO || mode > GRAPHS) return "explorer native op: unknown mode " + std::to_string(mode);
  if (clock != CLOCK_WALL && clock != CLOCK_GPU) {
    return "explorer native op: unknown clock " + std::to_string(clock);
  }
  if (rows <= 0 || cols <= 0) {
    return "explorer native op: a program for " + std::to_string(rows) + " x " +
           std::to_string(cols) + " inputs";
  }
  auto program = std::make_shared<Program>();
  program->rows = rows;
  program->cols = cols;
  program->dtype = dtype;
  program->device = device;
  program->tokens = std::move(tokens);
  const std::string wrong = decode_steps(code, tensors, program->steps);
  if (!wrong.empty()) return wrong;
  State& st = state();
  std::vector<ProgramPtr> dropped;  // released after the lock: a program may hold tensors
  std::lock_guard<std::mutex> guard(st.lock);
  ModuleEntry& entry = st.modules[module_id];
  if (entry.mode != mode) {  // programs set up for another mode's clock rules
    entry.mode = mode;
    for (auto& by_clock : entry.programs) {
      for (auto& p : by_clock) dropped.push_back(std::move(p));
      by_clock.clear();
    }
  }
  auto& programs = entry.programs[clock];
  for (auto it = programs.begin(); it != programs.end(); ++it) {
    const Program& p = **it;
    if (p.rows == rows && p.cols == cols && p.dtype == dtype && p.device == device) {
      dropped.push_back(std::move(*it));
      programs.erase(it);
      break;
    }
  }
  if (!program->steps.empty()) programs.push_back(std::move(program));
  return "";
}

void forget(int64_t module_id) {
  State& st = state();
  ModuleEntry dropped;  // released after the lock: a program may hold tensors
  std::lock_guard<std::mutex> guard(st.lock);
  auto found = st.modules.find(module_id);
  if (found == st.modules.end()) return;
  dropped = std::move(found->second);
  st.modules.erase(found);
}

int64_t new_token() {
  State& st = state();
  std::lock_guard<std::mutex> guard(st.lock);
  return st.next_token++;
}

void retire(int64_t token) {
  State& st = state();
  std::lock_guard<std::mutex> guard(st.lock);
  st.retired.insert(token);
}

std::vector<int64_t> counts(int64_t module_id) {
  State& st = state();
  std::lock_guard<std::mutex> guard(st.lock);
  int64_t programs = 0;
  auto found = st.modules.find(module_id);
  if (found != st.modules.end()) {
    programs = found->second.programs[0].size() + found->second.programs[1].size();
  }
  return {st.native_calls.load(), st.python_calls.load(), programs, st.refused_calls.load()};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(explorer, m) {
  m.def("sparse_call(Tensor x, int module_id) -> Tensor");
  m.def("native_set_functions(int launch, int capturing, int matmul) -> ()", &set_functions);
  m.def("native_functions() -> int[]", &functions);
  m.def(
      "native_set_program(int module_id, int mode, int clock, int rows, int cols, "
      "ScalarType dtype, int device, int[] tokens, int[] code, Tensor[] tensors) -> str",
      &set_program);
  m.def("native_forget(int module_id) -> ()", &forget);
  m.def("native_new_token() -> int", &new_token);
  m.def("native_retire(int token) -> ()", &retire);
  m.def("native_counts(int module_id) -> int[]", &counts);
}

TORCH_LIBRARY_IMPL(explorer, CUDA, m) { m.impl("sparse_call", &sparse_call); }

TORCH_LIBRARY_IMPL(explorer, CPU, m) { m.impl("sparse_call", &sparse_call); }
