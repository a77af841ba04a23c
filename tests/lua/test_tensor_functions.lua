-- The tensor functions users reach for, from Lua: sort, topk, var, std,
-- norm, max/min with indices, stack, eye, linspace, randint, *_like,
-- x:type(), integer clamp, and argument errors that name the function.
-- Values are checked against plain Lua loops; indices are 1-based.
package.path = (arg[0]:match("^(.*)/") or ".") .. "/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"

-- A 3 × 5 tensor with ties, and its rows and columns as Lua tables.
local data = { { 3, 1, 2, 1, 5 }, { 0, 5, 5, -2, 4 }, { 7, 7, 7, 7, 7 } }
local x = venom.tensor(data)

-- The line of `t` (a nested table) through position `at` along dim d (1 or 2).
local function line(t, d, at)
  local out = {}
  if d == 2 then for j = 1, #t[at] do out[j] = t[at][j] end
  else for i = 1, #t do out[i] = t[i][at] end end
  return out
end

-- Stable order of a Lua list: positions sorted by value, ties by position.
local function order(v, descending)
  local pos = {}
  for i = 1, #v do pos[i] = i end
  table.sort(pos, function(a, b)
    if v[a] ~= v[b] then
      if descending then return v[a] > v[b] end
      return v[a] < v[b]
    end
    return a < b
  end)
  return pos
end

-- sort and topk ---------------------------------------------------------------------
do
  local all_ok = true
  for _, d in ipairs({ 1, 2 }) do
    for _, desc in ipairs({ false, true }) do
      local v, i = x:sort(d, desc)
      local vt, it = v:totable(), i:totable()
      all_ok = all_ok and i:dtype() == "i64"
      for at = 1, (d == 2 and 3 or 5) do
        local ref = order(line(data, d, at), desc)
        local src = line(data, d, at)
        for k = 1, #ref do
          local gi = d == 2 and it[at][k] or it[k][at]
          local gv = d == 2 and vt[at][k] or vt[k][at]
          all_ok = all_ok and gi == ref[k] and gv == src[ref[k]]
        end
      end
    end
  end
  tap.ok(all_ok, "sort along each dim, both orders: values and 1-based stable indices match a Lua sort")
  local v, i = x:sort()
  tap.ok(i:get(1, 1) == 2 and i:get(1, 2) == 4 and v:get(2, 1) == -2,
    "sort() defaults to the last dim, ascending")
  local tv, ti = x:topk(2)
  tap.ok(tv:size(2) == 2 and tv:get(1, 1) == 5 and ti:get(1, 1) == 5 and tv:get(2, 1) == 5
    and ti:get(2, 1) == 2 and ti:get(2, 2) == 3 and ti:get(3, 1) == 1 and ti:get(3, 2) == 2,
    "topk(2): the largest two per row, first of ties first, 1-based")
  local sv, si = x:topk(1, 1, false)
  tap.ok(sv:get(1, 4) == -2 and si:get(1, 4) == 2 and si:get(1, 1) == 2, "topk(1, 1, false): the smallest per column")
  local k0 = x:topk(0)
  tap.is(k0:size(2), 0, "topk(0) is empty along the dim")
  -- the values' gradient goes back to where they came from
  local w = venom.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } })
  local leaf = x:clone():requires_grad_(true)
  local top = leaf:topk(2)
  ;(top * w):sum():backward()
  local g = leaf.grad:totable()
  tap.ok(g[1][5] == 1 and g[1][1] == 2 and g[2][2] == 3 and g[2][3] == 4 and g[3][1] == 5 and g[3][2] == 6
    and g[1][2] == 0 and g[3][5] == 0, "topk's gradient lands at the 1-based indices")
  tap.error_like(function() x:topk(6) end, "bad argument #1 to 'topk' %(k must be in 0..5", "topk(k > size) is refused")
  tap.error_like(function() x:sort(1, "yes") end, "descending must be a boolean", "sort's flag must be a boolean")
  tap.error_like(function() x:sort(3) end, "dim 3 out of range", "sort over a missing dim")
end

-- max / min with a dim: values and indices ----------------------------------------
do
  local ok = true
  for _, d in ipairs({ 1, 2 }) do
    local mv, mi = x:max(d)
    local nv, ni = x:min(d)
    ok = ok and mi:dtype() == "i64" and ni:dtype() == "i64"
    for at = 1, (d == 2 and 3 or 5) do
      local l = line(data, d, at)
      local bi, si = 1, 1
      for k = 2, #l do
        if l[k] > l[bi] then bi = k end
        if l[k] < l[si] then si = k end
      end
      ok = ok and mv[at] == l[bi] and mi[at] == bi and nv[at] == l[si] and ni[at] == si
    end
  end
  tap.ok(ok, "max(dim)/min(dim) give the values and the 1-based index of the first extremum")
  local kv, ki = x:max(2, true)
  tap.ok(kv:dim() == 2 and ki:size(2) == 1 and ki:get(2, 1) == 2, "max(dim, true) keeps the dim on both")
  tap.is(select("#", x:max()), 1, "max() over everything returns one value")
  tap.is(select("#", x:sum(1)), 1, "sum(dim) still returns one value")
  local gv, gi = venom.min(x, -1)
  tap.ok(gv[2] == -2 and gi[2] == 4, "venom.min(x, -1): values and indices")
end

-- var, std, norm --------------------------------------------------------------------
local function var_ref(l, correction)
  local m, s = 0, 0
  for _, v in ipairs(l) do m = m + v end
  m = m / #l
  for _, v in ipairs(l) do s = s + (v - m) ^ 2 end
  return s / (#l - correction)
end

do
  local flat = {}
  for i = 1, 3 do for j = 1, 5 do flat[#flat + 1] = data[i][j] end end
  tap.near(x:var():item(), var_ref(flat, 1), 1e-5, "var() over all elements, correction 1")
  tap.near(x:std({ correction = 0 }):item(), math.sqrt(var_ref(flat, 0)), 1e-5, "std({correction = 0}) over all")
  local ok = true
  local v2, s1 = x:var(2), x:std(1, { correction = 0 })
  for i = 1, 3 do ok = ok and math.abs(v2[i] - var_ref(data[i], 1)) < 1e-5 end
  for j = 1, 5 do ok = ok and math.abs(s1[j] - math.sqrt(var_ref(line(data, 1, j), 0))) < 1e-5 end
  tap.ok(ok, "var(2) and std(1, {correction = 0}) per line match the reference")
  local kd = x:var(2, { keepdim = true })
  tap.ok(kd:dim() == 2 and kd:size(2) == 1, "var(dim, {keepdim = true}) keeps the dim")
  tap.ok(x:var({ keepdim = true }):dim() == 2, "var({keepdim = true}) over all keeps every dim")
  tap.error_like(function() x:var(1, { unbiased = true }) end, "unknown option unbiased", "an unknown var option")
  tap.error_like(function() x:std(1, { correction = "1" }) end, "correction must be a number", "correction must be a number")

  local n1, n2, ninf = 0, 0, 0
  for _, v in ipairs(flat) do
    n1, n2, ninf = n1 + math.abs(v), n2 + v * v, math.max(ninf, math.abs(v))
  end
  tap.near(x:norm():item(), math.sqrt(n2), 1e-4, "norm() is the 2-norm over all")
  tap.near(x:norm(1):item(), n1, 1e-4, "norm(1)")
  tap.near(x:norm(math.huge):item(), ninf, 0, "norm(math.huge)")
  local r = x:norm(2, 2)
  ok = true
  for i = 1, 3 do
    local s = 0
    for j = 1, 5 do s = s + data[i][j] ^ 2 end
    ok = ok and math.abs(r[i] - math.sqrt(s)) < 1e-4
  end
  tap.ok(ok, "norm(2, 2) per row")
  tap.ok(x:norm(1, 1, true):dim() == 2, "norm(p, dim, true) keeps the dim")
  tap.error_like(function() x:norm(3) end, "p must be 1, 2 or math.huge", "norm(3) is refused")
end

-- stack ---------------------------------------------------------------------------
do
  local a, b, c, d = venom.randn(2, 3), venom.randn(2, 3), venom.randn(2, 3), venom.randn(2, 3)
  local list = { a, b, c, d }
  local s1, s2, s3 = venom.stack(list), venom.stack(list, 2), venom.stack(list, -1)
  tap.ok(s1:size(1) == 4 and s2:size(2) == 4 and s3:size(3) == 4 and s3:dim() == 3, "stack adds a dim of size 4 at 1, 2 or -1")
  local ok = true
  for k = 1, 4 do
    for i = 1, 2 do
      for j = 1, 3 do
        local v = list[k]:get(i, j)
        ok = ok and s1:get(k, i, j) == v and s2:get(i, k, j) == v and s3:get(i, j, k) == v
      end
    end
  end
  tap.ok(ok, "stack's entries are the inputs' entries")
  -- gradient through more tensors than one node holds: each input gets its slice
  local leaves = {}
  for k = 1, 5 do leaves[k] = venom.randn(2, 3):requires_grad_(true) end
  local w = venom.randn(2, 5, 3)
  ;(venom.stack(leaves, 2) * w):sum():backward()
  local gok = true
  for k = 1, 5 do
    local g = leaves[k].grad
    for i = 1, 2 do for j = 1, 3 do gok = gok and g and g:get(i, j) == w:get(i, k, j) end end
  end
  tap.ok(gok, "stack's gradient: each input gets its slice of the output's")
  tap.ok(venom.stack({ venom.tensor(1), venom.tensor(2) }):dim() == 1, "0-d tensors stack into a vector")
  tap.error_like(function() venom.stack({ a, venom.zeros(3, 2) }) end,
    "stack: element 2 of the table %(f32 %(3, 2%)%) does not match element 1", "stack needs one shape")
  tap.error_like(function() venom.stack({ a, 3 }) end, "element 2 of the table is a number", "stack of a number")
  tap.error_like(function() venom.stack({}) end, "non%-empty", "stack of nothing")
  tap.error_like(function() venom.stack({ a }, 4) end, "dim 4 out of range", "stack's dim goes up to ndim + 1")
end

-- eye, linspace, randint, *_like, type ----------------------------------------------
do
  local e = venom.eye(3)
  local ok = e:dtype() == "f32" and e:size(1) == 3 and e:size(2) == 3
  for i = 1, 3 do for j = 1, 3 do ok = ok and e:get(i, j) == (i == j and 1 or 0) end end
  tap.ok(ok, "eye(3) is the 3 × 3 identity")
  local r = venom.eye(2, 4, { dtype = "i64" })
  tap.ok(r:dtype() == "i64" and r:size(2) == 4 and r:get(2, 2) == 1 and r:get(2, 3) == 0, "eye(2, 4, {dtype = 'i64'})")
  tap.error_like(function() venom.eye(-1) end, "eye: sizes must be >= 0", "eye(-1)")

  local l = venom.linspace(-1, 1, 5)
  ok = l:numel() == 5
  for i = 1, 5 do ok = ok and math.abs(l[i] - (-1 + (i - 1) * 0.5)) < 1e-7 end
  tap.ok(ok and l[5] == 1, "linspace(-1, 1, 5): both ends included, the last exactly")
  tap.ok(venom.linspace(2, 3, 1)[1] == 2 and venom.linspace(2, 3, 1):numel() == 1, "linspace(start, stop, 1) is {start}")
  tap.is(venom.linspace(0, 10, 3, "i64"):dtype(), "i64", "linspace with a dtype")
  tap.error_like(function() venom.linspace(0, 1, -2) end, "steps must be in", "linspace with negative steps")
  tap.error_like(function() venom.linspace(0, 1) end, "expected %(start, stop, steps", "linspace without steps")

  venom.manual_seed(3)
  local a = venom.randint(1, 7, 600)
  venom.manual_seed(3)
  local b = venom.randint(1, 7, { 600 })
  local seen, inrange, same = {}, true, true
  for i = 1, 600 do
    inrange = inrange and a[i] >= 1 and a[i] <= 6 and a[i] % 1 == 0
    same = same and a[i] == b[i]
    seen[a[i]] = true
  end
  tap.ok(a:dtype() == "i64" and inrange, "randint(1, 7, n): i64 integers in [1, 7)")
  tap.ok(seen[1] and seen[6], "randint reaches both ends of the range")
  tap.ok(same, "manual_seed repeats randint")
  local c = venom.randint(0, 2, 2, 3, { dtype = "u8" })
  tap.ok(c:dtype() == "u8" and c:size(2) == 3, "randint with a shape and {dtype = 'u8'}")
  tap.error_like(function() venom.randint(5, 5, 3) end, "low < high", "randint needs low < high")
  tap.error_like(function() venom.randint(0, 300, 3, "u8") end, "does not fit in u8", "randint's range must fit the dtype")

  local y = venom.tensor({ { 1, 2, 3 } }, "i32")
  local z, o, f = venom.zeros_like(y), venom.ones_like(y, { dtype = "f32" }), venom.full_like(y, 7)
  tap.ok(z:dtype() == "i32" and z:size(2) == 3 and z:sum():item() == 0, "zeros_like keeps the shape and dtype")
  tap.ok(o:dtype() == "f32" and o:sum():item() == 3, "ones_like with {dtype = 'f32'}")
  tap.ok(f:dtype() == "i32" and f:get(1, 3) == 7 and f:device() == "cpu", "full_like(x, 7)")
  tap.error_like(function() venom.full_like(y, 0.5) end, "full_like: the number 0.5 is not representable as i32",
    "full_like refuses a value the dtype cannot hold")

  tap.is(x:type(), "venom.FloatTensor", "type() of f32")
  local names = { i64 = "venom.LongTensor", i32 = "venom.IntTensor", u8 = "venom.ByteTensor",
                  f16 = "venom.HalfTensor", bf16 = "venom.BFloat16Tensor" }
  ok = true
  for dt, name in pairs(names) do ok = ok and x:to(dt):type() == name end
  tap.ok(ok, "type() names every dtype as Torch7 does")
  local lt = x:type("venom.LongTensor")
  tap.ok(lt:dtype() == "i64" and lt:get(2, 4) == -2, "type('venom.LongTensor') converts")
  tap.is(x:type("i32"):type(), "venom.IntTensor", "type('i32') converts")
  tap.ok(rawequal(x:type("venom.FloatTensor"), x), "type(its own type) returns the tensor itself")
  tap.error_like(function() x:type("venom.DoubleTensor") end, "unknown type 'venom.DoubleTensor'", "an unknown type name")
  if venom.cuda.is_available() then
    tap.is(x:cuda():type(), "venom.cuda.FloatTensor", "type() on CUDA")
    tap.is(x:type("venom.cuda.LongTensor"):device(), "cuda", "type('venom.cuda.LongTensor') moves to CUDA")
  else
    tap.is(venom.type(x), "venom.FloatTensor", "venom.type(x) as a module function")
    tap.error_like(function() x:type("venom.cuda.FloatTensor") end, "CUDA", "type('venom.cuda...') without a device")
  end
end

-- clamp on integer tensors ------------------------------------------------------------
do
  local vals = { -100, -3, 0, 4, 99 }
  local ok = true
  for _, dt in ipairs({ "i32", "i64" }) do
    local c = venom.tensor(vals, dt):clamp(-5, 10)
    ok = ok and c:dtype() == dt
    for i, v in ipairs(vals) do ok = ok and c[i] == math.min(math.max(v, -5), 10) end
  end
  local u = venom.tensor({ 0, 7, 200, 255 }, "u8"):clamp(5, nil)
  ok = ok and u:dtype() == "u8" and u[1] == 5 and u[2] == 7 and u[4] == 255
  tap.ok(ok, "clamp on i32, i64 and u8 keeps the dtype and matches min(max(v, lo), hi)")
  local big = venom.tensor({ 2 ^ 60 }, "i64"):clamp(nil, 2 ^ 59)
  tap.is(big[1], 2 ^ 59, "i64 clamp is exact beyond 2^53")
  if venom.cuda.is_available() then -- the CUDA kernel against the CPU's
    local same = true
    for _, dt in ipairs({ "i32", "i64", "u8" }) do
      local t = venom.randint(0, 100, 1000, { dtype = dt })
      local want, got = t:clamp(10, 80), t:cuda():clamp(10, 80):cpu()
      same = same and got:dtype() == dt and want:eq(got):sum():item() == 1000
    end
    tap.ok(same, "integer clamp on CUDA matches the CPU")
  else
    tap.skip("no CUDA device")
  end
  tap.error_like(function() venom.tensor({ 1 }, "i32"):clamp(0.5) end,
    "clamp: the number 0.5 is not representable as i32", "clamp refuses a fractional bound on integers")
  tap.error_like(function() venom.tensor({ 1 }, "u8"):clamp(0, 300) end,
    "clamp: the number 300 is not representable as u8", "clamp refuses a bound u8 cannot hold")
end

-- argument errors name the function ---------------------------------------------------
do
  local t = venom.zeros(2, 3)
  local path = os.tmpname()
  tap.error_like(function() t:narrow("a") end, "bad argument #1 to 'narrow' %(dim must be an integer", "x:narrow('a')")
  local ok, err = pcall(t.narrow, t, "a")
  tap.ok(not ok and err:find("bad argument #2 to 'narrow'", 1, true), "pcall(x.narrow, x, 'a') names narrow: " .. tostring(err))
  ok, err = pcall(venom.save, path, { a = 1 })
  tap.ok(not ok and err:find("bad argument #2 to 'save' (tensors['a'] is a number", 1, true),
    "pcall(venom.save, path, {a = 1}) names save: " .. tostring(err))
  local function f() return venom.save(path, { a = 1 }) end -- a tail call: Lua sees 'f'
  ok, err = pcall(f)
  tap.ok(not ok and err:find("to 'save'", 1, true), "a tail call still names save: " .. tostring(err))
  tap.error_like(function() t:reshape({}) end, "reshape: shape %(2, 3%) has 6 elements", "x:reshape({}) names reshape")
  ok, err = pcall(venom.zeros, 2, "f64")
  tap.ok(not ok and err:find("to 'zeros'", 1, true), "pcall(venom.zeros, 2, 'f64') names zeros")
  ok, err = pcall(t.clamp, t, "a")
  tap.ok(not ok and err:find("bad argument #2 to 'clamp' (lo must be a number, found string)", 1, true),
    "clamp's bound must be a number: " .. tostring(err))
  ok, err = pcall(venom.manual_seed, "x")
  tap.ok(not ok and not err:find("'?'", 1, true) and err:find("'manual_seed'", 1, true), "no '?' for a module function")
  ok, err = pcall(t.free, 3)
  tap.ok(not ok and err:find("bad argument #1 to 'free' (expected a tensor, found number)", 1, true), "free(3) names free")
  os.remove(path)
end

tap.done()
