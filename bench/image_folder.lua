-- bench/image_folder.lua — how many images per second data.ImageFolder and
-- the DataLoader deliver with 0 and 2 decoding threads (workers): PNG files
-- decoded by stb_image, stacked into batches, with and without the
-- ToTensor + Normalize transforms.
--
--     venom bench/image_folder.lua [--n 10000] [--batch 256] [--repeats 3] [--root DIR]
--
-- Without --root, the first --n Fashion-MNIST test images (28 x 28 gray,
-- the Debian package) are written as PNG files to a temporary folder
-- (data.export_image_folder) and removed afterwards; --root reads an
-- existing image folder instead (all of it). Each repeat runs every
-- configuration once, in turn (A B A B ...), so that a shared machine's
-- load falls on all of them alike; the table gives the median images/s and
-- the spread (min..max) over the repeats. Never fails on time.
local venom = require "venom"
local util = require "venom.util"
local data = venom.data

-- A bad option prints "error: <message>" and exits with status 2 (util.parse_cli).
local opts = util.parse_cli(arg, { n = 10000, batch = 256, repeats = 3, root = "" }, nil, function(o)
  for _, k in ipairs({ "n", "batch", "repeats" }) do util.check_arg_int(o, k, 1) end
end)
local root, tmp = opts.root, nil
if root == "" then
  tmp = os.tmpname()
  os.remove(tmp)
  root = tmp
  local test = data.fashion_mnist("test")
  local n = math.min(opts.n, test.n)
  local t0 = venom.clock()
  data.export_image_folder(test.images:narrow(1, 1, n), test.labels:narrow(1, 1, n), root)
  print(("exported %d Fashion-MNIST test images as PNG in %.2f s (%.0f images/s, 1 thread)")
    :format(n, venom.clock() - t0, n / (venom.clock() - t0)))
end

local T = data.transforms
local configs = {}
for _, tf in ipairs({ "none", "ToTensor+Normalize" }) do
  for _, workers in ipairs({ 0, 2 }) do
    local transform = tf ~= "none" and { T.ToTensor(), T.Normalize({ 0.286 }, { 0.353 }) } or nil
    local ds = data.ImageFolder(root, { transform = transform })
    configs[#configs + 1] = { tf = tf, workers = workers, ds = ds, rates = {},
      loader = data.DataLoader(ds, { batch_size = opts.batch, shuffle = true, workers = workers }) }
  end
end

for _ = 1, opts.repeats do
  for _, c in ipairs(configs) do
    local t0 = venom.clock()
    for x, y in c.loader do x:free(); y:free() end
    c.rates[#c.rates + 1] = c.ds.n / (venom.clock() - t0)
  end
end

print(("%-20s  %7s  %7s  %14s  %20s"):format("transform", "workers", "batch", "images/s (med)",
  "spread (min..max)"))
for _, c in ipairs(configs) do
  table.sort(c.rates)
  print(("%-20s  %7d  %7d  %14.0f  %9.0f..%-9.0f"):format(c.tf, c.workers, opts.batch,
    c.rates[math.floor((#c.rates + 1) / 2)], c.rates[1], c.rates[#c.rates]))
end
if tmp then os.execute("rm -rf '" .. tmp .. "'") end
