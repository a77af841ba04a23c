--- venom — a sparse training engine driven from Lua.
--
--     local venom = require "venom"
--     local x = venom.randn(64, 784)
--
-- The module holds the tensor functions of the C binding (venom.core) and
-- loads its Lua submodules on first use (venom.nn, venom.optim, venom.data,
-- venom.util, venom.prune, venom.checkpoint, venom.sparse), so a submodule
-- that fails to load only breaks code that uses it.
local core = require "venom.core"

local venom = {}
for k, v in pairs(core) do
  venom[k] = v
end
venom.core = core

--- x:type() → the Torch7 name of x's type: "venom.FloatTensor" (f32),
-- "venom.LongTensor" (i64), "venom.IntTensor" (i32), "venom.ByteTensor"
-- (u8), "venom.HalfTensor" (f16), "venom.BFloat16Tensor" (bf16), with
-- "venom.cuda." in place of "venom." on CUDA. x:type(name) converts: to
-- the dtype and device such a name says ("venom.cuda.FloatTensor"), or to
-- a dtype on x's device (x:type("i64")); x itself when it is that already.
venom.type = core.type

-- Functions of the binding that venom.h does not document, documented here
-- for help() (the assignments only give the `---` comments a name).

--- x:dim() → the number of dimensions (0 for a scalar). x:size() → the
-- shape as a table {d1, d2, ...} (as x:shape()); x:size(d) → dimension d's
-- size (d counts from 1; negative d from the end; an error names the range).
venom.dim = core.dim
venom.size = core.size

--- x:t() → the transpose of a matrix (a view, no copy: x:transpose(1, 2));
-- a vector or a scalar comes back as is.
venom.t = core.t

--- x:to(dtype | device) → x converted to a dtype ("f32", "i32", "i64",
-- "u8", "bf16", "f16") or moved to a device ("cpu", "cuda"); one argument.
-- x:float(), x:int(), x:long(), x:byte() are x:to("f32" | "i32" | "i64" |
-- "u8"); x:cpu() is x:to("cpu"), x:is_cuda() → true for a CUDA tensor.
-- Float to integer conversions truncate toward zero (as C casts); a value
-- the integer dtype cannot hold is an error.
venom.to = core.to
venom.float = core.float
venom.int = core.int
venom.long = core.long
venom.byte = core.byte
venom.cpu = core.cpu
venom.is_cuda = core.is_cuda

--- x:add_(y), x:sub_(y), x:mul_(y), x:div_(y) → x, updated in place with
-- x + y, x − y, x · y, x / y (y a tensor that broadcasts to x's shape, or a
-- number). In place: refused on a leaf that requires grad and on a tensor
-- the graph saved for a backward (the error says which).
venom.add_ = core.add_
venom.sub_ = core.sub_
venom.mul_ = core.mul_
venom.div_ = core.div_

--- x:totable() → x's values as nested Lua tables (the shape's nesting;
-- a number for a 0-d tensor), copied to the CPU and to numbers.
venom.totable = core.totable

--- x:requires_grad_([on = true]) → x, marked (or unmarked) as a leaf whose
-- gradient backward() accumulates in x.grad. x:grad_fn() → the name of the
-- op that made x ("matmul", "relu", ...) for a result inside the graph, nil
-- for a leaf or a tensor made without autograd.
venom.requires_grad_ = core.requires_grad_
venom.grad_fn = core.grad_fn

--- venom.clock() → seconds (a double) on a monotonic clock, for timing
-- (differences only: the origin is arbitrary).
venom.clock = core.clock

--- venom.isatty([fd = 1 | file]) → true when the file descriptor (or Lua
-- file handle) is a terminal; progress bars redraw in place only then.
venom.isatty = core.isatty

--- venom.is_graph(v) → true when v is a graph (venom.graph: a CSR sparse
-- adjacency). venom.graph_from_edges(src, dst, n [, values]) → the n-node
-- graph with the edges src[k] → dst[k] (1-based i64 tensors), the engine
-- call behind venom.graph.from_edges (which documents the checks).
venom.is_graph = core.is_graph
venom.graph_from_edges = core.graph_from_edges

--- Engine calls behind Lua modules, not meant for scripts:
-- venom.profile_entries() → the per-op timer's rows {op, calls, forward_s,
-- backward_s, ...} (venom.profile reports them); venom.dist_reducer(params,
-- bucket_bytes) and venom.dist_reducer_stats(r) → the gradient bucket
-- all-reducer of distributed.DataParallel and its counters;
-- venom.vnm_shadow_decay_(W, S, f) → W with the weights outside the V:N:M
-- pattern S multiplied by f (prune.GMP's dense-shadow decay, SR-STE);
-- venom.dist_group(ranks) and venom.dist_group_info(g) → a communicator over
-- a list of 0-based world ranks and its (size, rank), behind
-- distributed.new_group (which documents them).
venom.profile_entries = core.profile_entries
venom.dist_reducer = core.dist_reducer
venom.dist_reducer_stats = core.dist_reducer_stats
venom.vnm_shadow_decay_ = core.vnm_shadow_decay_
venom.dist_group = core.dist_group
venom.dist_group_info = core.dist_group_info

--- venom.tensor(data, [dtype | opts]) → a new tensor holding `data`: a
-- number (a 0-d tensor), a tensor (copied, converted to dtype) or a
-- rectangular nested table of numbers (its nesting is the shape:
-- {{1, 2}, {3, 4}} is (2, 2)). dtype "f32" (default), "i64", "i32", "u8",
-- "bf16" or "f16"; opts {dtype =, device = "cpu"|"cuda", requires_grad =}.
-- Errors: a ragged table, a non-number entry, or a value the dtype cannot
-- hold exactly (0.5 or NaN for i64, 300 for u8).
venom.tensor = core.tensor

--- venom.is_tensor(v) → true when v is a venom tensor.
venom.is_tensor = core.is_tensor

--- venom.no_grad(fn, ...) → fn(...)'s results, with autograd off while fn
-- runs (no graph is recorded; results do not require grad). The previous
-- mode comes back when fn returns or fails. venom.set_grad_enabled(on) sets
-- it for the rest of the thread and returns the previous mode.
venom.no_grad = core.no_grad

--- venom.after_backward(fn): queues fn() to run once, at the end of the
-- next successful t:backward(), after every gradient of that backward is
-- final (PyTorch's queue_callback; nn.MoE's expert replicas average their
-- gradients there). Functions run in the order queued; one queued while
-- they run waits for the backward after. A backward that fails drops the
-- queue. An error in fn does not stop the functions after it (an expert's
-- replicas still average their gradients); backward() raises the first
-- error once all have run. fn must be a function.
venom.after_backward = core.after_backward

--- venom.gpt_decoder(spec) → decoder: a GPT-2-style model's decoding step
-- at batch 1 as one C call (vn_gpt_decoder_new, venom/transformer.h), for
-- models/gpt.lua's generate, which keeps one on the model. spec = {wte, wpe,
-- n_head, ln_f = norm, blocks = {{ln1, ln2 = norm, qkv, attn_proj, fc,
-- mlp_proj = projection, cache = (1, block_size, 3C) tensor}, ...}}, norm
-- = {weight, bias, eps, rms = bool}, projection = {weight, bias} (f32) or
-- {packed, gamma, norm, norm_eps} (packed ternary with its RMSNorm).
-- decoder:step(token, pos) runs a token (1-based) at a position (1-based;
-- the cache holds the earlier ones) and decoder:logits() gives its logits
-- as a list, bit for bit those of the same step through the ops;
-- decoder:next(token, pos, temperature, top_k) steps and draws the next
-- token as venom.sample_logits does, with u = venom.rand(1)'s draw;
-- decoder:generate(out, n, temperature, top_k) does that n times in one
-- call, from the last token of the list out at position #out, appending
-- each token drawn to out (the positions must stay within block_size);
-- decoder:current() is false once a tensor of the spec other than a cache
-- was freed or written in place (copy_, fill_, an optimizer step, a
-- load_state_dict) since the decoder was made: the packed weights are read
-- once, when it is made, so a decoder kept between generations is then
-- made again (GPT:generate does), and step, next and generate refuse to
-- run (an error) rather than read a written weight; decoder:free() lets go of the tensors. Errors name the bad field.
venom.gpt_decoder = core.gpt_decoder

--- venom.set_vnm_precision(p): the precision of the V:N:M products on the
-- CPU, for the whole process: the forward y = x·Wᵀ (nn.SparseLinear,
-- venom.vnm_linear, venom.vnm_spmm, the GPT's fused sparse MLP, the pruning shadow's
-- forward), the input gradient dx = dy·W (their backward, venom.vnm_spmm_t)
-- and the values' gradient dvalues = dyᵀ·x at the kept positions (their
-- backward, venom.vnm_sddmm). "f32" (default) or "bf16", where the
-- operands (x, dy, the kept values) are rounded to bf16 (round to nearest
-- even) and multiplied in pairs by AVX-512 BF16's vdpbf16ps with f32 sums:
-- each output within about 2^-7 times the sum of the absolute products
-- (Σ|w·x|, Σ|dy·w|, Σ|dy·x|) of the f32 one. The values stay f32 (the
-- trained copy, rounded at each call); CUDA is not affected. venom.vnm_precision() says
-- which is set. Errors: a string that is neither; "bf16" on a CPU without
-- avx512_bf16 or with VENOM_NO_AVX512 set (the message says which).
-- C: vn_vnm_set_precision (venom/sparse.h).
venom.set_vnm_precision = core.set_vnm_precision
venom.vnm_precision = core.vnm_precision

--- venom.set_vnm_cuda_dx(path): how the input gradient dx = dY·W of V:N:M
-- layers (nn.SparseLinear, venom.vnm_linear, venom.vnm_spmm_t) runs on
-- CUDA, for the whole process: "auto" (default: the rule below), "sparse"
-- (the Sparse Tensor Core kernel) or "dense" (cuBLAS on a dense 16-bit W,
-- rebuilt once per optimizer step and kept with the matrix: R·K·2 bytes).
-- The rule of "auto", an estimate until a GPU has timed both: dense when
-- M < 8, dY has at least 256 rows and R·K ≥ 2^20. Both give the CPU's dx
-- up to the order of f32 sums, finite wherever the CPU's is (an Inf or NaN
-- in dY sends the dense path back to the sparse kernel). The CPU is not
-- affected. venom.vnm_cuda_dx() says which is set. Errors: any other string.
-- C: vn_vnm_set_cuda_dx (venom/sparse.h).
venom.set_vnm_cuda_dx = core.set_vnm_cuda_dx
venom.vnm_cuda_dx = core.vnm_cuda_dx

--- venom.get_rng_state() → the engine RNG's state (xoshiro256**) as an i64
-- tensor of 4 elements; venom.set_rng_state(t) puts such a tensor back, so
-- the random draws that follow repeat (checkpoints store it).
venom.get_rng_state = core.get_rng_state
--- venom.set_rng_state(t): the engine RNG's state from t, an i64 tensor of
-- 4 elements as venom.get_rng_state() returns it (anything else is an error).
venom.set_rng_state = core.set_rng_state

--- venom.cuda: the CUDA device.
--   is_available()  → true when a CUDA device and driver are present and
--                     venom was built with CUDA (VENOM_CUDA, see README)
--   device_count()  → number of devices (venom uses the first)
--   device_name()   → e.g. "NVIDIA H200 (sm_90, 139.8 GiB)"
--   synchronize()   → wait for queued GPU work (kernels run asynchronously;
--                     t:item() and copies to the CPU wait by themselves)
--   memory_stats()  → {in_use = bytes, cached = bytes} of the caching allocator
--   empty_cache()   → give cached GPU memory back to the driver
--   set_allow_tf32(bool) → let f32 matmuls use TF32 tensor cores (off by
--                     default); returns the previous setting
venom.cuda = {
  is_available = core.cuda_is_available,
  device_count = core.cuda_device_count,
  device_name = core.cuda_device_name,
  synchronize = core.cuda_synchronize,
  memory_stats = core.cuda_memory_stats,
  empty_cache = core.cuda_empty_cache,
  set_allow_tf32 = core.cuda_set_allow_tf32,
}

--- venom.autocast(dtype, fn, ...) → fn(...)'s results, with matmul, linear
-- and the V:N:M layers on CUDA tensors computed from `dtype` ("bf16" or
-- "f16"; V:N:M layers use bf16 unless it is "f16") operands
-- with f32 accumulation while fn runs (mixed precision, Micikevicius et al.
-- 2018): parameters, gradients and all other ops stay f32, and the backward
-- of those products runs at the same precision even outside fn. The
-- previous setting comes back when fn returns or fails. CPU ops are not
-- affected. venom.set_autocast(dtype | nil) sets it for the rest of the
-- thread instead and returns the previous dtype ("f32" = off).
function venom.autocast(dtype, fn, ...)
  if type(fn) ~= "function" then
    error(("autocast: expected (dtype, function), got a %s for the function"):format(type(fn)), 2)
  end
  if dtype ~= nil and dtype ~= "bf16" and dtype ~= "f16" and dtype ~= "f32" then
    error(("autocast: dtype must be 'bf16', 'f16' or 'f32' (or nil: off), got %s"):format(
      type(dtype) == "string" and ("'%s'"):format(dtype) or type(dtype)), 2)
  end
  local prev = core.set_autocast(dtype)
  local res = { pcall(fn, ...) }
  core.set_autocast(prev)
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, table.maxn(res))
end

-- State dicts and files ----------------------------------------------------------
--
-- One rule joins state dicts and safetensors files: a state dict's tensors
-- are the file's tensors, and its other entries (numbers, strings, booleans:
-- a sparse layer's V, N and M) are the file's "__metadata__" under the same
-- names ("1.V" = "64"). venom.load gives them back as strings, which
-- load_state_dict accepts where a number is expected.

--- venom._state_dict(t, meta) → t marked as a state dict: venom.save writes its non-tensor entries to
-- the metadata, and a read of a name t lacks falls back to `meta` (the
-- file's metadata, for venom.load). Used by Module:state_dict().
function venom._state_dict(t, meta)
  return setmetatable(t, { __state_dict = true, __index = meta, __metadata = meta })
end

local function is_state_dict(t)
  local mt = type(t) == "table" and getmetatable(t)
  return type(mt) == "table" and mt.__state_dict == true
end

-- An error raised at the user's line (venom.util loads venom: required late).
local function fail(msg) require("venom.util").fail(msg) end

-- A venom.core call with its error raised at the user's line.
local function call(fn, ...)
  local ok, a, b = pcall(fn, ...)
  if not ok then fail(require("venom.util").error_text(a)) end
  return a, b
end

--- venom.save(path, tensors [, metadata]) writes a safetensors file
-- atomically (a temporary file, fsync, rename; see vn_save): `tensors` maps
-- names to tensors, `metadata` names to strings, numbers (written so they
-- read back exactly) or booleans. A state dict (model:state_dict()) may be
-- given as `tensors` whole: its numbers, strings and booleans go to the
-- metadata under their own names (a name in both tables is an error), so
-- venom.save(path, model:state_dict()) works for sparse models too.
function venom.save(path, tensors, metadata)
  if is_state_dict(tensors) and (metadata == nil or type(metadata) == "table") then
    local t, m = {}, {}
    for k, v in pairs(metadata or {}) do m[k] = v end
    for k, v in pairs(tensors) do
      local kind = type(v)
      if kind == "number" or kind == "string" or kind == "boolean" then
        if m[k] ~= nil then
          fail(("save: '%s' is both in the state dict and in the metadata"):format(tostring(k)))
        end
        m[k] = v
      else
        t[k] = v
      end
    end
    tensors, metadata = t, m
  end
  call(core.save, path, tensors, metadata)
end

--- venom.load(path) → tensors, metadata: the file's tensors (name → tensor;
-- F64 ones converted to f32) and its metadata (key → string). The tensors
-- table is a state dict whose reads fall back to the metadata (pairs()
-- lists the tensors only), so model:load_state_dict(venom.load(path)) also
-- finds the numbers that venom.save put in the metadata.
function venom.load(path)
  local tensors, meta = call(core.load, path)
  return venom._state_dict(tensors, meta), meta
end

-- Shifts every integer component of the dotted names of sd by `by`;
-- values are kept. The metadata a loaded state dict falls back to is renamed
-- too.
-- The decimal string digits + by (by = 1 or -1) as a string, exact for any
-- length (tonumber would round a 20-digit index); nil below 0.
local function decimal_add(digits, by)
  local d = { digits:byte(1, -1) }
  local i = #d
  while i >= 1 do
    local v = d[i] - 48 + by
    if v >= 0 and v <= 9 then d[i] = v + 48; break end
    d[i] = (v < 0 and 9 or 0) + 48
    i = i - 1
  end
  if i == 0 then
    if by < 0 then return nil end
    table.insert(d, 1, 49) -- 99 + 1 = 100
  end
  local s = string.char(unpack(d)):gsub("^0+(%d)", "%1")
  return s
end

local function shift_names(who, sd, by)
  if type(sd) ~= "table" then
    fail(("%s: expected a state dict (a table of name → tensor), got %s"):format(who, type(sd)))
  end
  local function rename(t)
    local out = {}
    for k, v in pairs(t) do
      if type(k) ~= "string" then
        fail(("%s: names must be strings, found a %s key"):format(who, type(k)))
      end
      local parts = {}
      for part in (k .. "."):gmatch("([^.]*)%.") do
        if part:match("^%d+$") then
          local n = decimal_add(part, by)
          if not n then
            fail(("%s: '%s' has the index %s; venom's module indices count from 1")
              :format(who, k, part))
          end
          part = n
        end
        parts[#parts + 1] = part
      end
      local name = table.concat(parts, ".")
      if out[name] ~= nil then
        fail(("%s: two entries map to '%s'"):format(who, name))
      end
      out[name] = v
    end
    return out
  end
  local mt = getmetatable(sd)
  local meta = type(mt) == "table" and mt.__metadata
  return venom._state_dict(rename(sd), meta and rename(meta) or nil)
end

--- venom.from_torch_names(sd) → a new state dict with PyTorch's names made
-- venom's: every integer component of a dotted name (the index of a child
-- in nn.Sequential or nn.ModuleList, counted from 0 in PyTorch) plus one,
-- so "0.weight" → "1.weight" and "layers.0.bias" → "layers.1.bias"; other
-- components and the values are kept (nn.Linear weights are (out, in) in
-- both). venom.to_torch_names(sd) is the inverse (every integer component
-- minus one). For sd = venom.load(path) the metadata it falls back to is
-- renamed too.
function venom.from_torch_names(sd) return shift_names("from_torch_names", sd, 1) end
function venom.to_torch_names(sd) return shift_names("to_torch_names", sd, -1) end

--- venom.export_ternary(model, path) and venom.load_ternary(model, path):
-- a model's nn.BitLinear layers as packed 2-bit ternary weights for
-- inference (lua/venom/nn_quant.lua has the details).
function venom.export_ternary(model, path) return require("venom.nn_quant").export_ternary(model, path) end
function venom.load_ternary(model, path) return require("venom.nn_quant").load_ternary(model, path) end

--- venom.profile(fn, ...) → report, fn's results: forward and backward
-- time per op kind while fn runs (lua/venom/profile.lua has the details).
function venom.profile(fn, ...) return require("venom.profile")(fn, ...) end

local submodules = { nn = true, optim = true, data = true, util = true, prune = true,
                     checkpoint = true, sparse = true, plot = true, metrics = true, help = true,
                     graph = true, image = true, distributed = true, amp = true }

return setmetatable(venom, {
  __index = function(t, k)
    if submodules[k] then
      local m = require("venom." .. k)
      rawset(t, k, m)
      return m
    end
  end,
})
