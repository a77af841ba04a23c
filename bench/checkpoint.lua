-- bench/checkpoint.lua — speed of venom.save / venom.load (safetensors) for
-- checkpoints of growing size, each one f32 tensor per 16 MB.
--
--     venom bench/checkpoint.lua [--dir /tmp] [--max-mb 1024] [--repeats 3]
--
-- save includes the fsync of the file and of its directory (what makes the
-- write atomic and durable), so it measures the disk; load reads from the
-- page cache after the save. Best of --repeats runs. Prints a table; never
-- fails on time.
local venom = require "venom"
local util = require "venom.util"

-- A bad option prints "error: <message>" and exits with status 2 (util.parse_cli).
local opts = util.parse_cli(arg, { dir = "/tmp", max_mb = 1024, repeats = 3 }, nil, function(o)
  util.check_arg_int(o, "max_mb", 16)
  util.check_arg_int(o, "repeats", 1)
end)
local path = opts.dir .. "/venom-bench-checkpoint.safetensors"
local CHUNK = 4 * 1024 * 1024 -- f32 elements per tensor (16 MB)

print(("%8s  %8s  %10s  %10s  %10s  %10s"):format("MB", "tensors", "save s", "save MB/s",
  "load s", "load MB/s"))
local mb = 16
while mb <= opts.max_mb do
  local tensors, n = {}, mb / 16
  for i = 1, n do tensors[("layers.%d.weight"):format(i)] = venom.rand(CHUNK) end
  local best_save, best_load = math.huge, math.huge
  for _ = 1, opts.repeats do
    local t0 = venom.clock()
    venom.save(path, tensors, { note = "bench" })
    local t1 = venom.clock()
    local loaded = venom.load(path)
    local t2 = venom.clock()
    for _, t in pairs(loaded) do t:free() end
    best_save, best_load = math.min(best_save, t1 - t0), math.min(best_load, t2 - t1)
  end
  for _, t in pairs(tensors) do t:free() end
  print(("%8d  %8d  %10.3f  %10.0f  %10.3f  %10.0f"):format(mb, n, best_save, mb / best_save,
    best_load, mb / best_load))
  mb = mb * 4
end
os.remove(path)
